# shellcheck shell=bash
# scripts/env.sh: the environment every project script shares; source it, do not run it.
#
# Why: the server, the wasm front end, the tests and the services setup must agree on where the
# build goes (CARGO_TARGET_DIR), where the site bundle lives (SECKILL_SITE_ROOT), the bundle's
# name (LEPTOS_OUTPUT_NAME, also needed when the *server* compiles), which tools come first on
# PATH (npm binaryen's wasm-opt must beat Debian's binaryen 108, which breaks hydration) and
# where the local services listen. Everything can be overridden from the caller's environment.

SECKILL_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export SECKILL_ROOT

# Build output lives outside the checkout, so a fresh clone on the same machine reuses it.
export SECKILL_CACHE_DIR="${SECKILL_CACHE_DIR:-$HOME/.cache/seckill}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$SECKILL_CACHE_DIR/target}"
export SECKILL_SITE_ROOT="${SECKILL_SITE_ROOT:-$CARGO_TARGET_DIR/site}"
export LEPTOS_SITE_ROOT="${LEPTOS_SITE_ROOT:-$SECKILL_SITE_ROOT}"
export LEPTOS_OUTPUT_NAME="${LEPTOS_OUTPUT_NAME:-seckill_console}"
export LEPTOS_SITE_PKG_DIR="${LEPTOS_SITE_PKG_DIR:-pkg}"

# Tools we install ourselves (npm binaryen's wasm-opt): after ~/.cargo/bin, before /usr/bin.
export SECKILL_TOOLS_DIR="${SECKILL_TOOLS_DIR:-$SECKILL_CACHE_DIR/tools}"
case ":$PATH:" in
  *":$HOME/.cargo/bin:$SECKILL_TOOLS_DIR/bin:"*) ;;
  *) PATH="$HOME/.cargo/bin:$SECKILL_TOOLS_DIR/bin:$PATH" ;;
esac
export PATH

# schemathesis and openapi-python-client (the OpenAPI tests'), each in a venv of its own that
# scripts/setup.sh makes.
export SECKILL_SCHEMATHESIS="${SECKILL_SCHEMATHESIS:-$SECKILL_CACHE_DIR/schemathesis/bin/st}"
export SECKILL_OPENAPI_PYTHON_CLIENT="${SECKILL_OPENAPI_PYTHON_CLIENT:-$SECKILL_CACHE_DIR/openapi-python-client/bin/openapi-python-client}"

# Data of the services this project starts itself (gitignored).
export SECKILL_LOCAL_DIR="${SECKILL_LOCAL_DIR:-$SECKILL_ROOT/.local}"

# Service ports (the defaults are the standard ones; services already listening there are used as they are).
export SECKILL_PG_PORT="${SECKILL_PG_PORT:-5432}"
export SECKILL_REDIS_PORT="${SECKILL_REDIS_PORT:-6379}"
export SECKILL_AMQP_PORT="${SECKILL_AMQP_PORT:-5672}"
export SECKILL_ETCD_PORT="${SECKILL_ETCD_PORT:-2379}"
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:$SECKILL_PG_PORT/seckill}"
export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:$SECKILL_REDIS_PORT/}"
export AMQP_URL="${AMQP_URL:-amqp://guest:guest@127.0.0.1:$SECKILL_AMQP_PORT/%2f}"
export ETCD_ENDPOINTS="${ETCD_ENDPOINTS:-http://127.0.0.1:$SECKILL_ETCD_PORT}"
if [[ -z "${PROTOC:-}" && -x /usr/bin/protoc ]]; then export PROTOC=/usr/bin/protoc; fi

# log MESSAGE...: one line of what a script is doing, on stderr so stdout stays clean.
log() { printf '[%s] %s\n' "$(basename "${0:-seckill}" .sh)" "$*" >&2; }

# die MESSAGE...: log and fail.
die() { log "ERROR: $*"; exit 1; }

# port_open HOST PORT: true when something accepts TCP connections there (bash /dev/tcp, no tools).
port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

# wait_for_port HOST PORT [TIMEOUT_S] [NAME]: wait until the port accepts connections, fail after the timeout.
wait_for_port() {
  local host="$1" port="$2" timeout="${3:-30}" name="${4:-$1:$2}" waited=0
  until port_open "$host" "$port"; do
    if (( waited >= timeout * 2 )); then
      log "ERROR: $name did not open $host:$port within ${timeout}s"
      return 1
    fi
    sleep 0.5
    waited=$((waited + 1))
  done
}

# now_s: seconds since the epoch (for step timings).
now_s() { date +%s; }
