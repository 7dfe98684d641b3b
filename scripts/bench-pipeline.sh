#!/usr/bin/env bash
# scripts/bench-pipeline.sh: the "Order pipeline drain" benchmark of BENCHMARKS.md, one run
# of `seckill-drain`: 20,000 pre-orders drained PRE_CREATED -> UNPAID by the create-order
# consumer vs a bare consume-and-ack of the same 20,000 messages (same prefetch and batching)
# on a scratch queue, measured back to back; prints orders/s, msgs/s, their ratio (target
# >= 0.5) and the DB pool's peak connections in use.
#
# Usage: bash scripts/bench-pipeline.sh        (scripts/bench.sh calls it too)
#
# Self-contained and repeatable: builds the release binary, drops and recreates the database
# `seckill_bench_pipeline`, uses the AMQP prefix `bench-pipeline.<pid>` (its queues are deleted
# at the end, and expire after 10 idle minutes if the run dies). Output is printed and kept in
# $SECKILL_CACHE_DIR/bench/pipeline-<timestamp>.txt.
#
# Knobs (environment): BENCH_PIPELINE_ORDERS (20000), BENCH_PIPELINE_DB (seckill_bench_pipeline),
# BENCH_BUILD (1: cargo build first), SECKILL_PIPELINE_ARGS (extra seckill-drain flags, e.g.
# "--prefetch 256 --batch-max 128"), BENCH_UPDATE_DOC (1: rewrite the result block of the
# "Order pipeline drain" section of BENCHMARKS.md).

set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$SECKILL_ROOT"

ORDERS="${BENCH_PIPELINE_ORDERS:-20000}"
BENCH_DB="${BENCH_PIPELINE_DB:-seckill_bench_pipeline}"
DRAIN="$CARGO_TARGET_DIR/release/seckill-drain"

export DATABASE_URL="${DATABASE_URL%/*}/$BENCH_DB"
ADMIN_DB_URL="${DATABASE_URL%/*}/postgres"
export SECKILL_AMQP_PREFIX="bench-pipeline.$$"
export RUST_LOG="${BENCH_RUST_LOG:-warn}"
unset SECKILL_CONFIG

if [[ "${BENCH_BUILD:-1}" == 1 ]]; then
  log "building seckill-drain (release)"
  cargo build --release -p seckill-server --bin seckill-drain >&2
fi
[[ -x "$DRAIN" ]] || die "missing $DRAIN (cargo build --release -p seckill-server --bin seckill-drain)"

log "recreating database $BENCH_DB"
psql "$ADMIN_DB_URL" -qX -v ON_ERROR_STOP=1 -c "DROP DATABASE IF EXISTS $BENCH_DB WITH (FORCE)" >/dev/null
psql "$ADMIN_DB_URL" -qX -v ON_ERROR_STOP=1 -c "CREATE DATABASE $BENCH_DB" >/dev/null

mkdir -p "$SECKILL_CACHE_DIR/bench"
OUT="$SECKILL_CACHE_DIR/bench/pipeline-$(date -u +%Y%m%dT%H%M%SZ).txt"
started="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
load_start="$(cut -d' ' -f1-3 /proc/loadavg)"
log "draining $ORDERS orders (output also in $OUT)"
# shellcheck disable=SC2086 # SECKILL_PIPELINE_ARGS is a list of flags
"$DRAIN" --orders "$ORDERS" ${SECKILL_PIPELINE_ARGS:-} | tee "$OUT"
load_end="$(cut -d' ' -f1-3 /proc/loadavg)"
finished="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
line="$(grep -m1 '^BENCH pipeline_drain' "$OUT")" || die "no result line in $OUT"

python3 - "$line" "$SECKILL_ROOT/BENCHMARKS.md" "${BENCH_UPDATE_DOC:-1}" "$started" "$finished" \
  "$load_start" "$load_end" "$(git rev-parse --short HEAD 2>/dev/null || echo '?')" "$(nproc)" \
  "$OUT" <<'PY'
import sys
line, doc, update, started, finished, load0, load1, commit, cores, out = sys.argv[1:]
f = dict(part.split("=", 1) for part in line.split()[2:])
n = int(f["orders"])
ratio, ratio_single = float(f["ratio"]), float(f["ratio_single"])
block = [
    f"Run {started} to {finished}, commit {commit}, {cores} cores, `release` build, load average "
    f"{load0} at the start and {load1} at the end, prefetch {f['prefetch']}, batch_max "
    f"{f['batch_max']}. Raw output: `{out}`.",
    "",
    f"| measurement ({n:,} messages each) | seconds | per second |",
    "|---|---|---|",
    f"| pipeline drain: PRE_CREATED → UNPAID (transaction per batch, pay timeouts confirmed, multiple-ack) "
    f"| {float(f['drain_s']):.2f} | {int(f['orders_per_s']):,} orders |",
    f"| bare consume + one multiple-ack per batch (same prefetch and batching) "
    f"| {float(f['bare_batched_s']):.2f} | {int(f['bare_batched_per_s']):,} msgs |",
    f"| bare consume + one ack per message (same prefetch) "
    f"| {float(f['bare_single_s']):.2f} | {int(f['bare_single_per_s']):,} msgs |",
    "",
    f"Ratio {ratio:.2f} against the batched bare consumer (target ≥ 0.5: "
    f"{'met' if ratio >= 0.5 else '**missed**'}); {ratio_single:.2f} against one ack per message. "
    f"DB pool peak in use during the drain: {f['pool_peak']} of {f['pool_max']}.",
]
print("\n".join(block))
if update != "1":
    sys.exit(0)
begin, end = "<!-- bench-pipeline.sh results: begin -->", "<!-- bench-pipeline.sh results: end -->"
text = open(doc, encoding="utf-8").read()
if begin not in text or end not in text:
    sys.exit(f"markers {begin} / {end} missing from {doc}")
head, rest = text.split(begin, 1)
_, tail = rest.split(end, 1)
open(doc, "w", encoding="utf-8").write(head + begin + "\n" + "\n".join(block) + "\n" + end + tail)
PY
