#!/usr/bin/env bash
# scripts/run.sh: README command 1: set up, build, migrate, seed the demo and serve on 127.0.0.1:3000.
#
# Why one script: on a fresh Debian 12 machine this installs and starts whatever is missing
# (scripts/setup.sh), builds the console's wasm bundle (scripts/build-front.sh) and the release
# server, applies the migrations, seeds the demo data (idempotent; prints the demo passwords) and
# then replaces itself with `seckill serve`. Arguments are passed on to `seckill serve`
# (e.g. --no-workers). SECKILL_BIND changes the listen address.
# Before serving it starts Prometheus with deploy/prometheus/prometheus.yml on
# SECKILL_PROMETHEUS_LISTEN (127.0.0.1:9090; whatever already listens there is used as it is),
# data under .local/prometheus, and writes deploy/prometheus/targets/seckill.json for this
# instance. SECKILL_PROMETHEUS=0 skips both.
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$SECKILL_ROOT"

bash scripts/setup.sh
bash scripts/build-front.sh

bind="${SECKILL_BIND:-127.0.0.1:3000}"

# The instance this script serves, as Prometheus's file-based discovery reads it; written
# whole then renamed, since Prometheus rereads the file when it changes.
write_targets() {
  local dir="$SECKILL_ROOT/deploy/prometheus/targets" host="${bind%:*}" port="${bind##*:}"
  case "$host" in 0.0.0.0 | "[::]" | "") host=127.0.0.1 ;; esac
  mkdir -p "$dir"
  printf '[{"targets": ["%s:%s"], "labels": {"started_by": "run.sh"}}]\n' "$host" "$port" >"$dir/seckill.json.tmp"
  mv "$dir/seckill.json.tmp" "$dir/seckill.json"
}

start_prometheus() {
  local listen="${SECKILL_PROMETHEUS_LISTEN:-127.0.0.1:9090}" data="$SECKILL_LOCAL_DIR/prometheus" bin
  if port_open "${listen%:*}" "${listen##*:}"; then
    log "Prometheus: something already listens on $listen, using it (it scrapes this instance if it runs deploy/prometheus/prometheus.yml; SECKILL_PROMETHEUS_LISTEN starts ours elsewhere)"
    return
  fi
  bin="$(command -v prometheus || echo /usr/bin/prometheus)"
  [[ -x "$bin" ]] || die "prometheus binary not found (scripts/setup.sh installs Debian's prometheus)"
  mkdir -p "$data"
  log "Prometheus: starting on http://$listen (data in $data, log $SECKILL_LOCAL_DIR/prometheus.log)"
  # setsid + nohup: Prometheus outlives this script, like the services setup.sh starts.
  setsid nohup "$bin" --config.file="$SECKILL_ROOT/deploy/prometheus/prometheus.yml" \
    --storage.tsdb.path="$data" --storage.tsdb.retention.time=15d --web.listen-address="$listen" \
    >>"$SECKILL_LOCAL_DIR/prometheus.log" 2>&1 </dev/null &
  echo $! >"$SECKILL_LOCAL_DIR/prometheus.pid"
  wait_for_port "${listen%:*}" "${listen##*:}" 30 Prometheus \
    || { tail -n 20 "$SECKILL_LOCAL_DIR/prometheus.log" >&2; die "Prometheus did not start"; }
}

if [[ "${SECKILL_PROMETHEUS:-1}" != 0 ]]; then
  write_targets
  start_prometheus
fi

log "server: cargo build --release -p seckill-server --bin seckill"
t0=$(now_s)
cargo build --quiet --release -p seckill-server --bin seckill
log "server: built in $(($(now_s) - t0))s"

bin="$CARGO_TARGET_DIR/release/seckill"
log "database: seckill migrate"
"$bin" migrate
log "demo: seckill demo"
"$bin" demo
log "serving the console and API on http://$bind (site root $SECKILL_SITE_ROOT)"
exec "$bin" serve "$@"
