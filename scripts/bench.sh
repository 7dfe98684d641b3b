#!/usr/bin/env bash
# scripts/bench.sh: the four buy-path benchmarks, each a ratio of two measurements taken
# back to back in this one run, recorded in BENCHMARKS.md.
#
#   1. sold-out storm on one hot item      vs  the same server's /healthz   (target >= 0.7)
#   2. success path (huge stock)           vs  redis-benchmark EVALSHA lua/deduct_stock.lua
#                                                                            (target >= 0.5)
#   3. group commit (preorder_batch_max 256) vs one transaction per request (target >= 3x)
#   4. DB deduction path (SECKILL_DEDUCTION=db) vs pgbench hot-row UPDATE    (target >= 5x)
#
# Usage: bash scripts/bench.sh
#
# Self-contained and repeatable: it builds the release binaries, drops and recreates the
# database `seckill_bench`, uses the Redis key prefix `bench:` (deleted before and after),
# serves on 127.0.0.1:3900 (refuses to start if something listens there), restarts its own
# server between benchmarks and stops it on exit. Raw output of every measurement lands in
# $SECKILL_CACHE_DIR/bench/<timestamp>/; the summary is printed and written between the
# result markers of BENCHMARKS.md.
#
# Knobs (environment): BENCH_CONCURRENCY (64), BENCH_STORM_REQUESTS (100000, for /healthz
# and the storm alike; both run to the last request, at most 60 s), BENCH_BUY_REQUESTS
# (30000, every buy measurement, one buyer each), BENCH_MAX_S (10: every buy measurement
# stops after this many seconds), BENCH_REDIS_N (200000), BENCH_PGBENCH_S (10), BENCH_BUILD
# (1: cargo build first), BENCH_PERF (1: `perf record` the server process during the healthz,
# storm, success and DB runs, when perf works), BENCH_UPDATE_DOC (1: rewrite the result block
# of BENCHMARKS.md), BENCH_EXTRAS (1: also run scripts/bench-pipeline.sh and
# scripts/bench-control.sh afterwards).
#
# Besides throughput and latency, each measurement records the CPU time of the server, Redis,
# PostgreSQL and the load tool (/proc and /usr/bin/time), Redis INFO commandstats deltas, the
# server's /metrics deltas (funnel stages, pre-order batch sizes) and, for the database-heavy
# runs, a 10 Hz sample of what the bench database's busy backends wait on.

set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$SECKILL_ROOT"

BENCH_DB="${BENCH_DB:-seckill_bench}"
BENCH_PORT="${BENCH_PORT:-3900}"
CONCURRENCY="${BENCH_CONCURRENCY:-64}"
STORM_REQUESTS="${BENCH_STORM_REQUESTS:-100000}"
STORM_USERS=$(((STORM_REQUESTS + 9) / 10)) # ten requests per buyer
BUY_REQUESTS="${BENCH_BUY_REQUESTS:-30000}"
MAX_S="${BENCH_MAX_S:-10}"
REDIS_N="${BENCH_REDIS_N:-200000}"
PGBENCH_S="${BENCH_PGBENCH_S:-10}"
PERF="${BENCH_PERF:-1}"

BIN="$CARGO_TARGET_DIR/release/seckill"
LOAD="$CARGO_TARGET_DIR/release/seckill-load"
BASE_URL="http://127.0.0.1:$BENCH_PORT"
PREFIX="bench:"

# Everything the server, the CLI and the load tool read: a database and key prefix of our own.
export DATABASE_URL="${DATABASE_URL%/*}/$BENCH_DB"
ADMIN_DB_URL="${DATABASE_URL%/*}/postgres"
export SECKILL_REDIS_PREFIX="$PREFIX"
export SECKILL_BIND="127.0.0.1:$BENCH_PORT"
export SECKILL_AMQP_PREFIX="bench"
export SECKILL_ETCD_PREFIX="/bench"
export RUST_LOG="${BENCH_RUST_LOG:-warn}"
unset SECKILL_CONFIG SECKILL_DEDUCTION SECKILL_BUY_USER_RATE SECKILL_BUY_MAX_IN_FLIGHT

RESULTS="$SECKILL_CACHE_DIR/bench/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$RESULTS"
FAILURES=()
SERVER_PID=""
PERF_PID=""
PGWAIT_PID=""

fail() {
  log "FAILED: $*"
  FAILURES+=("$*")
}

redis_flush_prefix() {
  redis-cli -p "$SECKILL_REDIS_PORT" --scan --pattern "${PREFIX}*" |
    xargs -r -n 500 redis-cli -p "$SECKILL_REDIS_PORT" UNLINK >/dev/null
}

stop_server() {
  if [[ -n "$SERVER_PID" ]]; then
    if kill -0 "$SERVER_PID" 2>/dev/null; then
      kill -TERM "$SERVER_PID" 2>/dev/null || true
      local waited=0
      while kill -0 "$SERVER_PID" 2>/dev/null && ((waited < 100)); do
        sleep 0.1
        waited=$((waited + 1))
      done
      kill -KILL "$SERVER_PID" 2>/dev/null || true
    fi
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
  fi
}

cleanup() {
  local rc=$?
  for pid in "$PERF_PID" "$PGWAIT_PID"; do
    [[ -n "$pid" ]] && { kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
  done
  stop_server
  redis_flush_prefix || true
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start_server LABEL [VAR=VALUE...]: serve with the given extra environment; dies if it does
# not answer /healthz within 30 s.
start_server() {
  local label="$1"
  shift
  port_open 127.0.0.1 "$BENCH_PORT" && die "something already listens on 127.0.0.1:$BENCH_PORT"
  env "$@" "$BIN" serve >"$RESULTS/server-$label.log" 2>&1 &
  SERVER_PID=$!
  local waited=0
  until curl -fsS -o /dev/null "$BASE_URL/healthz" 2>/dev/null; do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      tail -n 20 "$RESULTS/server-$label.log" >&2 || true
      SERVER_PID=""
      die "the server ($label) exited before answering /healthz; log: $RESULTS/server-$label.log"
    fi
    if ((waited >= 300)); then
      tail -n 20 "$RESULTS/server-$label.log" >&2 || true
      die "the server ($label) did not answer $BASE_URL/healthz within 30 s"
    fi
    sleep 0.1
    waited=$((waited + 1))
  done
  log "server ($label) up, pid $SERVER_PID"
}

# write_config FILE BATCH_MAX: the bench's funnel settings. Every request comes from
# 127.0.0.1, so the per-address and per-item windows and the local bucket are opened wide.
write_config() {
  cat >"$1" <<EOF
[buy]
per_ip_per_window = 1000000000
per_item_per_window = 1000000000
local_rate_per_s = 1000000000
per_user_per_window = 1000
preorder_batch_max = $2
EOF
}

# Snapshots around each measurement: CPU ticks of the machine, the server, Redis and
# PostgreSQL. PostgreSQL counts its background processes, the backends of the bench database
# and backends that exited (through the postmaster's child times); live backends of other
# databases (other people's tests) are left to "other".
cpu_snapshot() {
  python3 - "${SERVER_PID:-0}" "$BENCH_DB" <<'PY'
import json, os, sys
server, bench_db = int(sys.argv[1]), sys.argv[2]
def stat(pid):
    try:
        raw = open(f"/proc/{pid}/stat").read()
        cmdline = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    comm = raw[raw.index("(") + 1 : raw.rindex(")")]
    f = raw[raw.rindex(")") + 2 :].split()
    return comm, int(f[1]), int(f[11]) + int(f[12]), int(f[13]) + int(f[14]), cmdline
procs = {}
for entry in os.listdir("/proc"):
    if entry.isdigit():
        s = stat(entry)
        if s:
            procs[int(entry)] = s
cpu = [int(x) for x in open("/proc/stat").readline().split()[1:]]
busy = cpu[0] + cpu[1] + cpu[2] + cpu[5] + cpu[6] + cpu[7]
pg = pg_other = 0
for pid, (comm, ppid, own, children, cmdline) in procs.items():
    if comm != "postgres":
        continue
    is_backend = "(" in cmdline or "[local]" in cmdline  # "user db 127.0.0.1(port) state"
    if is_backend and f" {bench_db} " not in cmdline:
        pg_other += own
    else:
        pg += own
    if procs.get(ppid, ("",))[0] != "postgres":
        pg += children
print(json.dumps({
    "busy": busy,
    "server": procs[server][2] if server in procs else 0,
    "redis": sum(p[2] for p in procs.values() if p[0].startswith("redis-server")),
    "postgres": pg,
    "postgres_other_dbs": pg_other,
}))
PY
}

snapshot() { # NAME PHASE(0|1)
  cpu_snapshot >"$RESULTS/$1.cpu$2"
  redis-cli -p "$SECKILL_REDIS_PORT" INFO commandstats >"$RESULTS/$1.redis$2" 2>/dev/null || true
  if [[ -n "$SERVER_PID" ]]; then
    curl -fsS "$BASE_URL/metrics" >"$RESULTS/$1.metrics$2" 2>/dev/null || true
  fi
}

# perf: a sampling profile of the server process alone (its threads, user and kernel side).
perf_start() { # NAME
  PERF_PID=""
  [[ "$PERF" == 1 && -n "${PERF_OK:-}" && -n "$SERVER_PID" ]] || return 0
  perf record -p "$SERVER_PID" -F 999 -o "$RESULTS/$1.perf.data" >/dev/null 2>&1 &
  PERF_PID=$!
}

perf_finish() { # NAME
  [[ -n "$PERF_PID" ]] || return 0
  kill -TERM "$PERF_PID" 2>/dev/null || true
  wait "$PERF_PID" 2>/dev/null || true
  PERF_PID=""
  perf report -i "$RESULTS/$1.perf.data" --stdio --sort dso --percent-limit 1 \
    >"$RESULTS/$1.perf-dso.txt" 2>/dev/null || true
  perf report -i "$RESULTS/$1.perf.data" --stdio --sort dso,sym --percent-limit 0 \
    >"$RESULTS/$1.perf-sym.txt" 2>/dev/null || true
  rm -f "$RESULTS/$1.perf.data"
}

# PostgreSQL wait sampling: ten times a second, what each busy backend of the bench database
# is doing (on CPU, waiting for a row lock, flushing WAL, waiting for the client's next
# statement), over one connection.
pgwait_start() { # NAME
  PGWAIT_PID=""
  local rounds=$(((MAX_S > PGBENCH_S ? MAX_S : PGBENCH_S) * 10 + 100))
  local stop="$RESULTS/$1.pgwait.stop"
  rm -f "$stop"
  (
    for ((i = 0; i < rounds; i++)); do
      [[ -e "$stop" ]] && break
      echo "SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') || ' (' || state || ')'
            FROM pg_stat_activity WHERE datname = '$BENCH_DB' AND backend_type = 'client backend'
            AND pid <> pg_backend_pid() AND state <> 'idle';"
      sleep 0.1
    done
  ) | psql "$DATABASE_URL" -AtqX >"$RESULTS/$1.pgwait" 2>/dev/null &
  PGWAIT_PID=$!
}

pgwait_finish() { # NAME
  [[ -n "$PGWAIT_PID" ]] || return 0
  touch "$RESULTS/$1.pgwait.stop" # the loop ends, psql reads EOF and exits
  wait "$PGWAIT_PID" 2>/dev/null || true
  rm -f "$RESULTS/$1.pgwait.stop"
  PGWAIT_PID=""
}

# measure NAME KIND [--perf] [--pgwait] -- COMMAND...: one timed measurement; stdout to
# NAME.out, the tool's own CPU time to NAME.time. A non-zero exit is recorded as a failure.
measure() {
  local name="$1" kind="$2" profile=0 pgwait=0
  shift 2
  while [[ "$1" != -- ]]; do
    case "$1" in
      --perf) profile=1 ;;
      --pgwait) pgwait=1 ;;
      *) die "measure: unknown option $1" ;;
    esac
    shift
  done
  shift
  echo "$kind" >"$RESULTS/$name.kind"
  log "measuring $name: $*"
  snapshot "$name" 0
  if ((profile)); then perf_start "$name"; fi
  if ((pgwait)); then pgwait_start "$name"; fi
  local rc=0
  /usr/bin/time -f '%e %U %S' -o "$RESULTS/$name.time" "$@" \
    >"$RESULTS/$name.out" 2>"$RESULTS/$name.err" || rc=$?
  snapshot "$name" 1
  perf_finish "$name"
  pgwait_finish "$name"
  if ((rc != 0)); then
    tail -n 5 "$RESULTS/$name.err" >&2 || true
    fail "$name exited with status $rc (see $RESULTS/$name.err)"
  fi
  return 0
}

# load NAME ITEM [--perf] [--pgwait] [seckill-load options...]: the project's load tool
# against our server.
load() {
  local name="$1" item="$2"
  shift 2
  local flags=()
  while [[ "${1:-}" == --perf || "${1:-}" == --pgwait ]]; do
    flags+=("$1")
    shift
  done
  measure "$name" load "${flags[@]}" -- "$LOAD" --base-url "$BASE_URL" --activity "$ACTIVITY" \
    --item "$item" --concurrency "$CONCURRENCY" --duration-s "${LOAD_MAX_S:-$MAX_S}" --json "$@"
}

# warm ITEM FIRST_USER: a short unmeasured buy run, so pools and caches are warm.
warm() {
  "$LOAD" --base-url "$BASE_URL" --activity "$ACTIVITY" --item "$1" --concurrency "$CONCURRENCY" \
    --users 1000 --retries-per-user 1 --first-user "$2" --json >"$RESULTS/warmup-$1-$2.json" \
    2>/dev/null || fail "warm-up on item $1 failed"
}

admin_api() { # METHOD PATH JSON -> prints the response body; dies on a non-2xx answer
  local body status
  body="$(curl -sS -X "$1" -H "Authorization: Bearer $ADMIN_TOKEN" -H 'Content-Type: application/json' \
    -w '\n%{http_code}' "$BASE_URL$2" -d "$3")"
  status="${body##*$'\n'}"
  body="${body%$'\n'*}"
  [[ "$status" == 2* ]] || die "$1 $2 answered $status: $body"
  printf '%s' "$body"
}

# --- preflight ---------------------------------------------------------------------------
for tool in curl python3 psql redis-cli redis-benchmark pgbench; do
  command -v "$tool" >/dev/null || die "$tool is needed"
done
port_open 127.0.0.1 "$SECKILL_PG_PORT" || die "PostgreSQL is not listening on $SECKILL_PG_PORT (run scripts/setup.sh)"
port_open 127.0.0.1 "$SECKILL_REDIS_PORT" || die "Redis is not listening on $SECKILL_REDIS_PORT (run scripts/setup.sh)"
port_open 127.0.0.1 "$BENCH_PORT" && die "something already listens on 127.0.0.1:$BENCH_PORT"
if [[ "$PERF" == 1 ]] && command -v perf >/dev/null &&
  perf record -a -o /dev/null -- true >/dev/null 2>&1; then
  PERF_OK=1
fi

{
  echo "started_utc=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "loadavg_start=$(cut -d' ' -f1-3 /proc/loadavg)"
  echo "nproc=$(nproc)"
  echo "commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo +dirty)"
  echo "bench_db=$BENCH_DB"
  echo "concurrency=$CONCURRENCY"
  echo "storm_requests=$STORM_REQUESTS"
  echo "buy_requests=$BUY_REQUESTS"
  echo "max_s=$MAX_S"
  echo "redis_n=$REDIS_N"
  echo "pgbench_s=$PGBENCH_S"
} >"$RESULTS/meta.txt"
log "results in $RESULTS"

if [[ "${BENCH_BUILD:-1}" == 1 ]]; then
  log "building release binaries"
  cargo build --release -p seckill-server --bin seckill --bin seckill-load >&2
fi
[[ -x "$BIN" && -x "$LOAD" ]] || die "missing $BIN or $LOAD (cargo build --release -p seckill-server)"

# --- a fresh database and key space --------------------------------------------------------
log "recreating database $BENCH_DB"
psql "$ADMIN_DB_URL" -qX -v ON_ERROR_STOP=1 -c "DROP DATABASE IF EXISTS $BENCH_DB WITH (FORCE)" >/dev/null
psql "$ADMIN_DB_URL" -qX -v ON_ERROR_STOP=1 -c "CREATE DATABASE $BENCH_DB" >/dev/null
redis_flush_prefix
"$BIN" migrate >/dev/null
echo 'bench-password-1' | "$BIN" admin create-user --username bench-merchant --role merchant \
  --merchant "Bench" >/dev/null
ADMIN_TOKEN="$("$BIN" admin token --username bench-merchant --label bench)"
psql "$DATABASE_URL" -qX -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
CREATE TABLE bench_hot (id integer PRIMARY KEY, stock bigint NOT NULL);
INSERT INTO bench_hot VALUES (1, 1000000000000);
SQL
echo 'UPDATE bench_hot SET stock = stock - 1 WHERE id = 1 AND stock > 0;' >"$RESULTS/hot.sql"

CONFIG_DEFAULT="$RESULTS/bench.toml"
CONFIG_BATCH1="$RESULTS/bench-batch1.toml"
write_config "$CONFIG_DEFAULT" 256
write_config "$CONFIG_BATCH1" 1

# --- phase A: default server (group commit 256, Redis deduction) ---------------------------
start_server default SECKILL_CONFIG="$CONFIG_DEFAULT"

new_item() { # NAME -> id
  admin_api POST /admin/api/items "{\"name\":\"$1\",\"description\":\"bench\",\"price_cents\":100}" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])'
}
ITEM_STORM="$(new_item storm)"
ITEM_SUCCESS="$(new_item success)"
ITEM_GC1="$(new_item group-commit-off)"
ITEM_GC256="$(new_item group-commit-on)"
ITEM_DB="$(new_item db-deduction)"
BIG=10000000
starts="$(date -u -d '+10 minutes' +%Y-%m-%dT%H:%M:%SZ)"
ends="$(date -u -d '+6 hours' +%Y-%m-%dT%H:%M:%SZ)"
line() { printf '{"item_id":%s,"stock":%s,"per_user_limit":1,"price_cents":100}' "$1" "$2"; }
ACTIVITY="$(admin_api POST /admin/api/activities "{\"title\":\"bench\",\"starts_at\":\"$starts\",\
\"ends_at\":\"$ends\",\"kind\":\"standard\",\"pay_timeout_s\":900,\"items\":[$(line "$ITEM_STORM" 1),\
$(line "$ITEM_SUCCESS" $BIG),$(line "$ITEM_GC1" $BIG),$(line "$ITEM_GC256" $BIG),$(line "$ITEM_DB" $BIG)]}" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')"
"$BIN" prewarm "$ACTIVITY" >"$RESULTS/prewarm.json"
psql "$DATABASE_URL" -qX -v ON_ERROR_STOP=1 \
  -c "UPDATE activities SET starts_at = now() - interval '1 minute' WHERE id = $ACTIVITY" >/dev/null
sleep 1.5 # the buy API trusts its activity cache for 1 s
printf 'activity=%s\nitems=storm %s, success %s, gc1 %s, gc256 %s, db %s\n' "$ACTIVITY" "$ITEM_STORM" \
  "$ITEM_SUCCESS" "$ITEM_GC1" "$ITEM_GC256" "$ITEM_DB" >>"$RESULTS/meta.txt"
log "activity $ACTIVITY open: items storm $ITEM_STORM, success $ITEM_SUCCESS, gc1 $ITEM_GC1, gc256 $ITEM_GC256, db $ITEM_DB"

# Benchmark 1: sell the single unit, warm up, then /healthz and the storm back to back.
"$LOAD" --base-url "$BASE_URL" --activity "$ACTIVITY" --item "$ITEM_STORM" --users 1 --first-user 80000000 \
  --retries-per-user 1 --json >"$RESULTS/sellout.json" || fail "selling out the storm item failed"
python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["summary"]; sys.exit(0 if s["ok"]==1 else 1)' \
  "$RESULTS/sellout.json" || fail "the storm item's single unit was not sold"
"$LOAD" --base-url "$BASE_URL" --activity "$ACTIVITY" --item "$ITEM_STORM" --endpoint healthz \
  --concurrency "$CONCURRENCY" --requests 5000 --json >/dev/null 2>&1 || true
"$LOAD" --base-url "$BASE_URL" --activity "$ACTIVITY" --item "$ITEM_STORM" \
  --concurrency "$CONCURRENCY" --requests 5000 --json >/dev/null 2>&1 || true
# The same request count on both sides; 60 s only bounds a pathological run.
LOAD_MAX_S=60 load 1a-healthz "$ITEM_STORM" --perf --endpoint healthz --requests "$STORM_REQUESTS" \
  --users "$STORM_USERS" --retries-per-user 10
LOAD_MAX_S=60 load 1b-storm "$ITEM_STORM" --perf --requests "$STORM_REQUESTS" \
  --users "$STORM_USERS" --retries-per-user 10 --check --settle-s 1

# Benchmark 2: the success path, then the bare Lua deduction in Redis.
warm "$ITEM_SUCCESS" 90000000
load 2a-success "$ITEM_SUCCESS" --perf --pgwait --requests "$BUY_REQUESTS" --users "$BUY_REQUESTS" --retries-per-user 1 --check
SHA="$(redis-cli -p "$SECKILL_REDIS_PORT" SCRIPT LOAD "$(cat lua/deduct_stock.lua)")"
redis-cli -p "$SECKILL_REDIS_PORT" SET "${PREFIX}rb:stock" 1000000000000 >/dev/null
measure 2b-redis-evalsha redis-benchmark -- redis-benchmark -h 127.0.0.1 -p "$SECKILL_REDIS_PORT" \
  -c 50 -n "$REDIS_N" -P 1 -r 100000000 --csv \
  EVALSHA "$SHA" 2 "${PREFIX}rb:stock" "${PREFIX}rb:bought" __rand_int__ 1 1000000
redis-cli -p "$SECKILL_REDIS_PORT" DEL "${PREFIX}rb:stock" "${PREFIX}rb:bought" >/dev/null
stop_server

# Benchmark 3: the same success-path load, one transaction per request, then group commit.
start_server batch1 SECKILL_CONFIG="$CONFIG_BATCH1"
warm "$ITEM_GC1" 90000000
load 3a-batch1 "$ITEM_GC1" --pgwait --requests "$BUY_REQUESTS" --users "$BUY_REQUESTS" --retries-per-user 1 --check --settle-s 1
stop_server
start_server batch256 SECKILL_CONFIG="$CONFIG_DEFAULT"
warm "$ITEM_GC256" 90000000
load 3b-batch256 "$ITEM_GC256" --pgwait --requests "$BUY_REQUESTS" --users "$BUY_REQUESTS" --retries-per-user 1 --check --settle-s 1
stop_server

# Benchmark 4: deduction in PostgreSQL on one hot row, then pgbench on a one-row table.
# (--check's Redis-vs-orders comparison only warns here: this path leaves Redis stock alone.)
start_server db SECKILL_CONFIG="$CONFIG_DEFAULT" SECKILL_DEDUCTION=db
warm "$ITEM_DB" 90000000
load 4a-db-deduction "$ITEM_DB" --perf --pgwait --requests "$BUY_REQUESTS" --users "$BUY_REQUESTS" --retries-per-user 1 --check --settle-s 1
measure 4b-pgbench-hot pgbench --pgwait -- pgbench -n -c 50 -j 2 -T "$PGBENCH_S" -M prepared \
  -f "$RESULTS/hot.sql" "$DATABASE_URL"
stop_server

echo "loadavg_end=$(cut -d' ' -f1-3 /proc/loadavg)" >>"$RESULTS/meta.txt"
echo "finished_utc=$(date -u +%Y-%m-%dT%H:%M:%SZ)" >>"$RESULTS/meta.txt"

# --- summary ---------------------------------------------------------------------------------
printf '%s\n' "${FAILURES[@]:-}" | sed '/^$/d' >"$RESULTS/failures.txt"
python3 - "$RESULTS" "$SECKILL_ROOT/BENCHMARKS.md" "${BENCH_UPDATE_DOC:-1}" <<'PY'
import csv, io, json, os, re, sys

results, doc, update_doc = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
TICK = os.sysconf("SC_CLK_TCK")

def read(name, default=None):
    try:
        return open(os.path.join(results, name)).read()
    except OSError:
        return default

meta = dict(l.split("=", 1) for l in read("meta.txt", "").splitlines() if "=" in l)

def metrics(text):
    out = {}
    for line in (text or "").splitlines():
        if line.startswith("#") or not line.strip():
            continue
        key, _, value = line.rpartition(" ")
        try:
            out[key] = float(value)
        except ValueError:
            pass
    return out

def commandstats(text):
    out = {}
    for line in (text or "").splitlines():
        m = re.match(r"cmdstat_(\S+):calls=(\d+)", line)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out

AREAS = [  # where the server's samples go, by symbol
    ("HTTP (hyper, axum, tower)", r"hyper|httparse|\bhttp::|axum|tower|bytes::|h2::"),
    ("Redis client", r"\bredis::|combine::"),
    ("PostgreSQL client (sqlx)", r"sqlx"),
    ("JSON (serde)", r"serde"),
    ("JWT (HMAC-SHA256, base64)", r"jsonwebtoken|sha2|hmac|base64|ring::|aws_lc"),
    ("metrics (prometheus)", r"prometheus"),
    ("per-request AppState/LeptosOptions clone+drop", r"AppState|LeptosOptions"),
    ("tokio runtime", r"tokio::"),
]

def area(dso, sym):
    if dso.startswith("[kernel"):
        return "kernel (TCP, syscalls, scheduler)"
    if dso.startswith("libc"):
        return "libc (malloc/free, memmove)"
    if dso.startswith("[vdso]"):
        return "clock_gettime"
    for label, pattern in AREAS:
        if re.search(pattern, sym):
            return label
    return "funnel and other server code" if dso == "seckill" else dso

def measurement(name):
    kind = (read(f"{name}.kind") or "").strip()
    if not kind:
        return None
    out = read(f"{name}.out", "")
    m = {"name": name, "kind": kind, "ok": True}
    try:
        if kind == "load":
            report = json.loads(out)
            s = report["summary"]
            m.update(rps=s["throughput_rps"], requests=s["requests"], wall=s["wall_s"],
                     p50=(s["latency_ms"] or {}).get("p50"), p99=(s["latency_ms"] or {}).get("p99"),
                     outcomes=", ".join(f'{o["status"]} {o["code"]} {o["count"]}' for o in s["outcomes"]),
                     transport=s["transport_errors"], ok_count=s["ok"],
                     checks=report.get("checks") or [])
        elif kind == "redis-benchmark":
            rows = list(csv.DictReader(io.StringIO(out)))
            row = rows[-1]
            m.update(rps=float(row["rps"]), requests=int(meta.get("redis_n", "0")) or None, p50=float(row["p50_latency_ms"]), p99=float(row["p99_latency_ms"]),
                     outcomes="all EVALSHA replies counted (script always deducts)", checks=[])
        elif kind == "pgbench":
            tps = re.search(r"tps = ([\d.]+) \(without initial connection time\)", out)
            lat = re.search(r"latency average = ([\d.]+) ms", out)
            tx = re.search(r"number of transactions actually processed: (\d+)", out)
            m.update(rps=float(tps.group(1)), p50=None, p99=None, requests=int(tx.group(1)) if tx else None,
                     outcomes=f"latency average {lat.group(1)} ms" if lat else "", checks=[])
    except Exception as error:  # a broken run shows up in the table, not as a traceback
        m.update(ok=False, rps=None, error=str(error), checks=[])
    t = ((read(f"{name}.time") or "").strip().splitlines() or [""])[-1].split()
    if len(t) >= 3:
        m["tool_wall"], m["tool_cpu"] = float(t[0]), float(t[1]) + float(t[2])
    c0, c1 = read(f"{name}.cpu0"), read(f"{name}.cpu1")
    if c0 and c1:
        c0, c1 = json.loads(c0), json.loads(c1)
        m["cpu"] = {k: (c1[k] - c0[k]) / TICK for k in c0}
    r0, r1 = commandstats(read(f"{name}.redis0")), commandstats(read(f"{name}.redis1"))
    if r1:
        delta = {k: r1[k] - r0.get(k, 0) for k in r1 if r1[k] - r0.get(k, 0) > 0}
        delta.pop("info", None)
        m["redis_cmds"] = delta
    g0, g1 = metrics(read(f"{name}.metrics0")), metrics(read(f"{name}.metrics1"))
    if g1:
        d = {k: g1[k] - g0.get(k, 0.0) for k in g1}
        m["funnel"] = {re.sub(r'seckill_funnel_requests_total\{outcome="([^"]*)",stage="([^"]*)"\}', r"\2:\1", k): int(v)
                       for k, v in d.items() if k.startswith("seckill_funnel_requests_total{") and v > 0}
        count, total = d.get("seckill_preorder_batch_size_count", 0), d.get("seckill_preorder_batch_size_sum", 0)
        if count:
            m["batches"], m["batch_avg"] = int(count), total / count
    areas = {}
    for line in (read(f"{name}.perf-sym.txt") or "").splitlines():
        row = re.match(r"\s+([\d.]+)%\s+(\S+)\s+\[.\]\s+(.*)", line)
        if row:
            share, dso, sym = float(row.group(1)), row.group(2), row.group(3)
            areas[area(dso, sym)] = areas.get(area(dso, sym), 0.0) + share
    m["perf_areas"] = sorted(areas.items(), key=lambda kv: -kv[1])
    waits = [l.strip() for l in (read(f"{name}.pgwait") or "").splitlines() if l.strip()]
    if waits:
        counts = {}
        for w in waits:
            counts[w] = counts.get(w, 0) + 1
        m["pgwait"] = sorted(counts.items(), key=lambda kv: -kv[1])
    return m

names = ["1a-healthz", "1b-storm", "2a-success", "2b-redis-evalsha", "3a-batch1", "3b-batch256",
         "4a-db-deduction", "4b-pgbench-hot"]
ms = {n: measurement(n) for n in names}

def rps(n):
    m = ms.get(n)
    return m.get("rps") if m else None

benches = [
    ("1", "sold-out storm vs /healthz", "1b-storm", "1a-healthz", 0.7),
    ("2", "success path vs Redis EVALSHA deduct_stock.lua", "2a-success", "2b-redis-evalsha", 0.5),
    ("3", "group commit (batch 256) vs one txn per request (batch 1)", "3b-batch256", "3a-batch1", 3.0),
    ("4", "DB deduction path vs pgbench hot-row UPDATE", "4a-db-deduction", "4b-pgbench-hot", 5.0),
]

def fmt(x, d=0):
    return "n/a" if x is None else f"{x:,.{d}f}"

L = []
L.append(f"Run {meta.get('started_utc', '?')} to {meta.get('finished_utc', '?')}, commit {meta.get('commit', '?')}, "
         f"{meta.get('nproc', '?')} cores, load average {meta.get('loadavg_start', '?')} at the start and "
         f"{meta.get('loadavg_end', '?')} at the end. Raw output: `{results}`.")
L.append("")
L.append("| # | benchmark | seckill side | baseline side | ratio | target | met |")
L.append("|---|---|---|---|---|---|---|")
summary = []
for num, title, ours, base, target in benches:
    a, b = rps(ours), rps(base)
    ratio = a / b if a and b else None
    met = "n/a" if ratio is None else ("yes" if ratio >= target else "**no**")
    tgt = f">= {target:g}" if target < 1 else f">= {target:g}x"
    L.append(f"| {num} | {title} | {fmt(a)} /s | {fmt(b)} /s | {fmt(ratio, 2)} | {tgt} | {met} |")
    summary.append({"bench": num, "ours": a, "base": b, "ratio": ratio, "target": target})
L.append("")
L.append("Every measurement (CPU is seconds used during the measurement; `other` is the rest of the "
         "machine's busy time: other users' builds and tests, interrupts):")
L.append("")
L.append("| measurement | tool | requests | wall s | throughput /s | p50 ms | p99 ms | CPU s: server / redis / postgres / load tool / other | machine busy |")
L.append("|---|---|---|---|---|---|---|---|---|")
for n in names:
    m = ms.get(n)
    if not m:
        L.append(f"| {n} | not run | | | | | | | |")
        continue
    cpu = m.get("cpu", {})
    wall = m.get("tool_wall") or m.get("wall") or 0
    tool_cpu = m.get("tool_cpu", 0.0)
    other = cpu.get("busy", 0) - cpu.get("server", 0) - cpu.get("redis", 0) - cpu.get("postgres", 0) - tool_cpu
    cores = int(meta.get("nproc", "2") or 2)
    busy_pct = 100 * cpu.get("busy", 0) / (cores * wall) if wall else 0
    tool = {"load": "seckill-load", "redis-benchmark": "redis-benchmark", "pgbench": "pgbench"}[m["kind"]]
    requests = m.get("requests")
    L.append(f"| {n} | {tool} | {fmt(requests)} | {fmt(m.get('wall') or wall, 2)} | {fmt(m.get('rps'))} | "
             f"{fmt(m.get('p50'), 2)} | {fmt(m.get('p99'), 2)} | "
             f"{cpu.get('server', 0):.1f} / {cpu.get('redis', 0):.1f} / {cpu.get('postgres', 0):.1f} / {tool_cpu:.1f} / {max(other, 0):.1f} | {busy_pct:.0f}% |")
L.append("")
L.append("Outcomes, checks and counters per measurement:")
L.append("")
for n in names:
    m = ms.get(n)
    if not m:
        continue
    L.append(f"* **{n}**: {m.get('outcomes', '')}" + (f"; transport errors {m['transport']}" if m.get("transport") else "")
             + (f"; ERROR {m['error']}" if m.get("error") else ""))
    for c in m.get("checks", []):
        L.append(f"  * `{c['verdict']}  {c['name']}: {c['detail']}`")
    if m.get("funnel"):
        f = m["funnel"]
        L.append("  * funnel: " + ", ".join(f"{k} {v}" for k, v in sorted(f.items())))
    if m.get("batches"):
        L.append(f"  * pre-order transactions: {m['batches']}, average batch {m['batch_avg']:.1f} pre-orders"
                 + (f", {m['batches'] / m['wall']:.0f} commits/s" if m.get("wall") else ""))
    if m.get("redis_cmds"):
        cmds = m["redis_cmds"]
        total = sum(cmds.values())
        # Commands a client sends itself; the rest of INFO commandstats ran inside scripts.
        trips = sum(cmds.get(k, 0) for k in ("evalsha", "eval", "setex", "getdel", "mget"))
        n = m.get("requests") or 0
        per = (f": {trips / n:.2f} round trips (EVALSHA, SETEX, GETDEL, MGET) and {total / n:.2f} commands "
               "executed (scripts' inner calls included) per request") if n else ""
        L.append(f"  * Redis, all clients: {trips} round trips, {total} commands{per}; top: "
                 + ", ".join(f"{k} {v}" for k, v in sorted(cmds.items(), key=lambda kv: -kv[1])[:8]))
    if m.get("perf_areas"):
        server_us = 1e6 * m.get("cpu", {}).get("server", 0) / (m.get("requests") or 1)
        L.append(f"  * perf, server CPU ({server_us:.0f} us per request) by area: "
                 + ", ".join(f"{a} {p:.0f}%" for a, p in m["perf_areas"] if p >= 1))
    if m.get("pgwait"):
        total = sum(c for _, c in m["pgwait"])
        L.append(f"  * PostgreSQL busy backends of {meta.get('bench_db', 'the bench db')}, sampled every 100 ms "
                 f"({total} backend-samples): " + ", ".join(f"{w} {100 * c / total:.0f}%" for w, c in m["pgwait"][:7]))
failures = [l for l in (read("failures.txt") or "").splitlines() if l.strip()]
if failures:
    L.append("")
    L.append("Failures in this run:")
    for l in failures:
        L.append(f"* {l}")

text = "\n".join(L)
open(os.path.join(results, "summary.md"), "w").write(text + "\n")
json.dump({"benchmarks": summary, "measurements": ms, "meta": meta}, open(os.path.join(results, "summary.json"), "w"),
          indent=2, default=str)
print(text)

if update_doc:
    begin, end = "<!-- bench.sh results: begin -->", "<!-- bench.sh results: end -->"
    block = f"{begin}\n{text}\n{end}"
    try:
        current = open(doc).read()
    except OSError:
        current = ("# Benchmarks\n\nThe four buy-path benchmarks, run with `bash scripts/bench.sh`.\n\n"
                   f"{begin}\n{end}\n")
    if begin in current and end in current:
        head, rest = current.split(begin, 1)
        _, tail = rest.split(end, 1)
        current = head + block + tail
    else:
        current = current.rstrip("\n") + "\n\n" + block + "\n"
    open(doc, "w").write(current)
PY

# The pipeline drain and the switch propagation benchmarks have scripts of their
# own, each with its own database and prefixes; they run after the buy benchmarks so the
# machine is not shared between them.
for extra in bench-pipeline bench-control; do
  if [[ "${BENCH_EXTRAS:-1}" == 1 ]]; then
    log "running scripts/$extra.sh"
    bash "$SECKILL_ROOT/scripts/$extra.sh" || FAILURES+=("scripts/$extra.sh failed")
  fi
done

if ((${#FAILURES[@]})); then
  log "finished with ${#FAILURES[@]} failure(s):"
  printf '  %s\n' "${FAILURES[@]}" >&2
  exit 1
fi
log "finished; results in $RESULTS"
