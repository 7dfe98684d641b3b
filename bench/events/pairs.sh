#!/bin/bash
# bench/events/pairs.sh: the sold-out storm alone against the same storm with 10,000 buyer
# event streams (GET /api/events) open on the one instance, in pairs (order alternating), and
# the server's resident memory before and with the streams (BENCHMARKS.md, "Buyer event
# streams"). A quick measurement, not a `seckill-bench` command yet: see there.
#
# Usage: bash bench/events/pairs.sh SECKILL SECKILL_LOAD REQUESTS_PER_STORM
# Needs the loopback services, a free 127.0.0.1:3950, and writes the database
# seckill_events_bench and the key, queue and etcd prefixes `evbench`.
set -euo pipefail
SECKILL=$1 LOAD=$2 REQUESTS=$3
HERE=$(cd "$(dirname "$0")" && pwd)
RUN=$(mktemp -d)
export DATABASE_URL=postgres://postgres@127.0.0.1:5432/seckill_events_bench
export SECKILL_REDIS_PREFIX=evbench: SECKILL_AMQP_PREFIX=evbench SECKILL_ETCD_PREFIX=/evbench
export SECKILL_BIND=127.0.0.1:3950 SECKILL_SALE_DIR=$RUN/sale SECKILL_MAX_CONNECTIONS=12000
export SECKILL_CONFIG=$RUN/bench.toml RUST_LOG=warn
# Every request comes from 127.0.0.1: the per-address windows are opened wide, as for `funnel`.
printf '[buy]\nper_ip_per_window = 1000000000\nper_item_per_window = 1000000000\nlocal_rate_per_s = 1000000000\nper_user_per_window = 1000\n\n[events]\nmax_streams = 12000\n\n[control]\nsnapshot_path = "%s/snapshot.json"\n' "$RUN" > "$RUN/bench.toml"
ulimit -n 20000
psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE IF EXISTS seckill_events_bench" -c "CREATE DATABASE seckill_events_bench"
"$SECKILL" migrate && "$SECKILL" demo > "$RUN/demo.txt"
"$SECKILL" serve > "$RUN/server.log" 2>&1 &
SERVER=$!
# What the run leaves is removed on the way out (the pipeline's two exchanges stay: rabbitmqctl
# cannot delete an exchange; they are empty and cost nothing).
clean_up() {
  kill $SERVER 2> /dev/null || true
  redis-cli --scan --pattern 'evbench:*' | xargs -r -n 500 redis-cli del > /dev/null
  for queue in create pay-timeout dead pay-delay.900s; do rabbitmqctl -q delete_queue "evbench.order.$queue" > /dev/null 2>&1 || true; done
  curl -s -X POST http://127.0.0.1:2379/v3/kv/deleterange -d "{\"key\":\"$(printf /evbench | base64)\",\"range_end\":\"$(printf /evbenci | base64)\"}" > /dev/null
  sleep 1
  psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE IF EXISTS seckill_events_bench"
}
trap clean_up EXIT
until curl -sf http://127.0.0.1:3950/healthz > /dev/null; do sleep 0.5; done
# The demo's activity (1, one item of 100 units) opens five minutes after `demo`: open it now,
# wait for the server's copy of it, and sell it out.
psql -h 127.0.0.1 -U postgres -d seckill_events_bench -qc "UPDATE activities SET starts_at = now() WHERE id = 1"
until curl -s http://127.0.0.1:3950/api/activities/1/status | grep -q '"phase":"open"'; do sleep 1; done
"$LOAD" --base-url http://127.0.0.1:3950 --activity 1 --item 1 --users 300 --requests 300 --retries-per-user 1 > /dev/null
storm() {
  "$LOAD" --base-url http://127.0.0.1:3950 --activity 1 --item 1 --users 10000 --first-user 2000000 \
    --requests "$REQUESTS" --concurrency 64 --json 2>/dev/null \
    | python3 -c 'import json, sys; s = json.load(sys.stdin)["summary"]; print(round(s["throughput_rps"]), s["outcomes"])'
}
with_streams() {
  python3 "$HERE/streams.py" 3950 10000 1 "$SERVER" 600 > "$RUN/streams-$1.json" &
  local holder=$!
  until grep -q streams "$RUN/streams-$1.json" 2>/dev/null; do sleep 1; done
  echo "pair $1 streams: $(cat "$RUN/streams-$1.json")"
  echo "pair $1 with 10,000 streams: $(storm)"
  kill $holder
  # The server lets a closed stream go at its next heartbeat (15 s).
  sleep 20
}
for pair in 1 2 3; do
  if [ $((pair % 2)) -eq 1 ]; then echo "pair $pair alone: $(storm)"; with_streams $pair
  else with_streams $pair; echo "pair $pair alone: $(storm)"; fi
done
