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
# "--prefetch 256 --batch-max 128").

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
log "draining $ORDERS orders (output also in $OUT)"
# shellcheck disable=SC2086 # SECKILL_PIPELINE_ARGS is a list of flags
"$DRAIN" --orders "$ORDERS" ${SECKILL_PIPELINE_ARGS:-} | tee "$OUT"
