#!/usr/bin/env bash
# scripts/test.sh: README command 2 (and CI, via .ci/run): the whole test suite.
#
# Why: the tests run the real server against real PostgreSQL, Redis, RabbitMQ and etcd and drive
# the hydrated console in Debian's chromium, so the services and the wasm bundle must exist first
# (scripts/setup.sh, scripts/build-front.sh). Then formatting, clippy with warnings as errors and
# `cargo test --workspace`, with the environment from scripts/env.sh (site root, service URLs).
# Prints how long each step took, also when a step fails.
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$SECKILL_ROOT"

started=$(now_s)
timings=()
current=""

summary() {
  local rc=$?
  [[ -n "$current" ]] && timings+=("$(printf '%-14s %5ss  FAILED' "$current" $(($(now_s) - step_t0)))")
  log "step timings:"
  local line
  for line in "${timings[@]}"; do printf '    %s\n' "$line" >&2; done
  log "total $(($(now_s) - started))s, $([[ $rc -eq 0 ]] && echo passed || echo "FAILED (exit $rc)")"
}
trap summary EXIT

# step NAME CMD...: run one step, remember how long it took.
step() {
  current="$1"; shift
  step_t0=$(now_s)
  log "== $current: $*"
  "$@"
  timings+=("$(printf '%-14s %5ss' "$current" $(($(now_s) - step_t0)))")
  current=""
}

# A failing test's message is what a reader of the run needs, and a CI log shows its tail: a
# backtrace of a hundred lines after every message would push the message out of it. One
# test run by hand gets its backtrace with RUST_BACKTRACE=1.
export RUST_BACKTRACE=0

step setup bash scripts/setup.sh
step build-front bash scripts/build-front.sh
step fmt cargo fmt --all --check
step clippy cargo clippy --quiet --workspace --all-targets -- -D warnings
step test cargo test --workspace
