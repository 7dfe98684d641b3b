#!/usr/bin/env bash
# scripts/rebuild-time.sh FILE [N]: how long the debug test binaries take to rebuild after a
# one-line change in FILE (a comment appended, then removed), N times (3 by default).
#
# Why: the crate split is judged by what a one-line change costs the next engineer on two
# cores; BENCHMARKS.md ("Rebuild after a one-line change") records the figures. Each run first
# brings the build up to date, so only the change itself is timed.
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$SECKILL_ROOT"
file=$1
runs=${2:-3}
cargo test --workspace --no-run -q >/dev/null 2>&1
for run in $(seq 1 "$runs"); do
  echo "// rebuild probe $run" >>"$file"
  started=$(date +%s.%N)
  cargo test --workspace --no-run -q >/dev/null 2>&1 || { sed -i '$ d' "$file"; exit 1; }
  ended=$(date +%s.%N)
  sed -i '$ d' "$file"
  awk -v run="$run" -v s="$started" -v e="$ended" -v loadavg="$(cut -d' ' -f1-3 /proc/loadavg)" \
    'BEGIN { printf "run %d: %.1f s (load %s)\n", run, e - s, loadavg }'
done
cargo test --workspace --no-run -q >/dev/null 2>&1
