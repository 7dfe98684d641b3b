#!/usr/bin/env bash
# scripts/run.sh: README command 1: set up, build, migrate, seed the demo and serve on 127.0.0.1:3000.
#
# Why one script: on a fresh Debian 12 machine this installs and starts whatever is missing
# (scripts/setup.sh), builds the console's wasm bundle (scripts/build-front.sh) and the release
# server, applies the migrations, seeds the demo data (idempotent; prints the demo passwords) and
# then replaces itself with `seckill serve`. Arguments are passed on to `seckill serve`
# (e.g. --no-workers). SECKILL_BIND changes the listen address.
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$SECKILL_ROOT"

bash scripts/setup.sh
bash scripts/build-front.sh

log "server: cargo build --release -p seckill-server --bin seckill"
t0=$(now_s)
cargo build --quiet --release -p seckill-server --bin seckill
log "server: built in $(($(now_s) - t0))s"

bin="$CARGO_TARGET_DIR/release/seckill"
log "database: seckill migrate"
"$bin" migrate
log "demo: seckill demo"
"$bin" demo
log "serving the console and API on http://${SECKILL_BIND:-127.0.0.1:3000} (site root $SECKILL_SITE_ROOT)"
exec "$bin" serve "$@"
