#!/usr/bin/env bash
# scripts/setup.sh: install and start everything the project needs, skipping what is already there.
#
# Why: the README's two commands (scripts/run.sh, scripts/test.sh) must work on a fresh Debian 12
# machine and be near no-ops on a prepared one. Steps:
#   1. Debian packages (services, the Debian `rustc-web` 1.96 toolchain used for the wasm front end,
#      lld, chromium, node/npm, protoc, prometheus with its promtool, nginx: the balancer the tests put
#      in front of several instances, run from their own folders), installed only when missing.
#   2. PostgreSQL, Redis, RabbitMQ, etcd: anything already listening on its port is used as it is;
#      otherwise it is started bound to 127.0.0.1 with its data under .local/ (gitignored).
#      The `seckill` database is created when missing.
#   3. Rust/wasm tools: rustup toolchain `debian-web` linked to Debian's rustc-web (it ships the
#      wasm32 target and the std sources for -Zbuild-std; `rustup target add` cannot download here),
#      clippy/rustfmt on the default toolchain, wasm-bindgen-cli at exactly Cargo.lock's version,
#      npm binaryen@132's wasm-opt (Debian's binaryen 108 breaks hydration), the browser test's deps.
#   4. schemathesis and openapi-python-client (PyPI, pinned), each in a venv under the cache,
#      for the OpenAPI tests (the fuzz, and a client generated from the document).
# Usage: scripts/setup.sh [packages] [services] [rust] [node] [python]   (default: all five, in this order)
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

LOCAL="$SECKILL_LOCAL_DIR"
mkdir -p "$LOCAL"

as_root() { if [[ $(id -u) -eq 0 ]]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else die "need root for: $*"; fi; }

# run_as USER CMD...: run a command as a service user when we are root, else as ourselves.
run_as() {
  local user="$1"; shift
  if [[ $(id -u) -eq 0 ]]; then runuser -u "$user" -- "$@"; else "$@"; fi
}

# own_by USER DIR: hand a data folder to a service user (root only; otherwise it is already ours).
own_by() {
  if [[ $(id -u) -eq 0 ]]; then
    chown -R "$1:$1" "$2"
    runuser -u "$1" -- test -w "$2" \
      || die "user $1 cannot reach $2 (a parent folder is not traversable); move the checkout or set SECKILL_LOCAL_DIR"
  fi
}

# --------------------------------------------------------------------------------------------
# 1. Debian packages. "package:command" = satisfied if the package is installed OR the command
#    exists (e.g. NodeSource's nodejs bundles npm, so Debian's npm must not be pulled in then).
# --------------------------------------------------------------------------------------------
install_packages() {
  local wanted=(
    postgresql redis-server rabbitmq-server etcd-server:etcd protobuf-compiler:protoc
    rustc-web cargo-web rust-web-src rust-web-llvm lld-22
    chromium:chromium chromium-driver:chromedriver fonts-liberation nodejs:node npm:npm pkg-config curl
    prometheus:promtool python3-venv nginx
  )
  local missing=() entry pkg cmd
  for entry in "${wanted[@]}"; do
    pkg="${entry%%:*}"; cmd=""
    [[ "$entry" == *:* ]] && cmd="${entry#*:}"
    if dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then continue; fi
    if [[ -n "$cmd" ]] && command -v "$cmd" >/dev/null 2>&1; then continue; fi
    missing+=("$pkg")
  done
  if ((${#missing[@]} == 0)); then
    log "Debian packages: all present"
    return
  fi
  log "Debian packages: installing ${missing[*]}"
  # Without systemd (containers), keep maintainer scripts from trying to start services: we start them below.
  local policy=/usr/sbin/policy-rc.d added_policy=0
  if [[ ! -d /run/systemd/system && ! -e $policy ]]; then
    as_root sh -c "printf '#!/bin/sh\nexit 101\n' > $policy && chmod +x $policy"
    added_policy=1
  fi
  local apt_log="$LOCAL/apt.log" ok=1
  { as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
  } >"$apt_log" 2>&1 || ok=0
  if ((added_policy)); then as_root rm -f "$policy"; fi
  if ((!ok)); then tail -n 30 "$apt_log" >&2; die "apt-get failed (full log: $apt_log)"; fi
}

# --------------------------------------------------------------------------------------------
# 2. Services.
# --------------------------------------------------------------------------------------------
start_postgres() {
  local port="$SECKILL_PG_PORT" cluster ver name pgbin
  if port_open 127.0.0.1 "$port"; then
    log "PostgreSQL: already listening on 127.0.0.1:$port, using it"
  else
    # A Debian cluster configured for this port (packaged install): start it without systemd.
    cluster="$(pg_lsclusters -h 2>/dev/null | awk -v p="$port" '$3 == p { print $1, $2; exit }' || true)"
    if [[ -n "$cluster" ]]; then
      read -r ver name <<<"$cluster"
      log "PostgreSQL: starting Debian cluster $ver/$name on port $port"
      as_root pg_ctlcluster --skip-systemctl-redirect "$ver" "$name" start
    else
      pgbin="$(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -n1)"
      [[ -x "$pgbin/initdb" ]] || die "PostgreSQL binaries not found under /usr/lib/postgresql"
      if [[ ! -f "$LOCAL/pg/PG_VERSION" ]]; then
        log "PostgreSQL: initdb into $LOCAL/pg (trust auth, loopback only)"
        mkdir -p "$LOCAL/pg"; own_by postgres "$LOCAL/pg"
        run_as postgres "$pgbin/initdb" -D "$LOCAL/pg" -U postgres --auth=trust -E UTF8 --no-locale >"$LOCAL/pg-initdb.log" 2>&1 \
          || { cat "$LOCAL/pg-initdb.log" >&2; die "initdb failed"; }
      fi
      log "PostgreSQL: starting $LOCAL/pg on 127.0.0.1:$port"
      touch "$LOCAL/postgres.log"; own_by postgres "$LOCAL/postgres.log"
      run_as postgres "$pgbin/pg_ctl" -D "$LOCAL/pg" -l "$LOCAL/postgres.log" -w -t 60 \
        -o "-k /tmp -h 127.0.0.1 -p $port" start >/dev/null \
        || { tail -n 20 "$LOCAL/postgres.log" >&2; die "PostgreSQL did not start"; }
    fi
  fi
  wait_for_port 127.0.0.1 "$port" 60 PostgreSQL
  ensure_database
}

# The seckill database (name taken from DATABASE_URL), created when missing.
ensure_database() {
  local base="${DATABASE_URL%%\?*}"
  local db="${base##*/}" admin="${base%/*}/postgres"
  if ! psql -w "$admin" -Atc 'select 1' >/dev/null 2>&1; then
    allow_loopback_trust || die "cannot connect to PostgreSQL as $admin (set DATABASE_URL)"
  fi
  if [[ "$(psql -w "$admin" -Atc "select 1 from pg_database where datname='$db'")" == 1 ]]; then
    log "PostgreSQL: database $db exists"
  else
    log "PostgreSQL: creating database $db"
    psql -w "$admin" -qc "create database \"$db\"" >/dev/null
  fi
}

# A freshly installed Debian cluster wants passwords on 127.0.0.1; the dev defaults have none.
# Only for a local Debian cluster on our port: put loopback "trust" lines first in pg_hba.conf.
allow_loopback_trust() {
  local cluster ver name hba
  cluster="$(pg_lsclusters -h 2>/dev/null | awk -v p="$SECKILL_PG_PORT" '$3 == p { print $1, $2; exit }' || true)"
  [[ -n "$cluster" ]] || return 1
  read -r ver name <<<"$cluster"
  hba="/etc/postgresql/$ver/$name/pg_hba.conf"
  grep -q 'seckill setup: loopback trust' "$hba" 2>/dev/null && return 1
  log "PostgreSQL: allowing passwordless loopback connections in $hba (local development)"
  as_root sh -c "{ printf '%s\n' '# seckill setup: loopback trust for local development' \
    'host all all 127.0.0.1/32 trust' 'host all all ::1/128 trust'; cat '$hba'; } > '$hba.new' && \
    chown --reference='$hba' '$hba.new' && chmod --reference='$hba' '$hba.new' && mv '$hba.new' '$hba'"
  as_root pg_ctlcluster --skip-systemctl-redirect "$ver" "$name" reload
  sleep 1
  psql -w "${DATABASE_URL%/*}/postgres" -Atc 'select 1' >/dev/null 2>&1
}

start_redis() {
  local port="$SECKILL_REDIS_PORT"
  if port_open 127.0.0.1 "$port"; then
    log "Redis: already listening on 127.0.0.1:$port, using it"
    return
  fi
  log "Redis: starting on 127.0.0.1:$port (data in $LOCAL/redis, no persistence)"
  mkdir -p "$LOCAL/redis"
  redis-server --daemonize yes --bind 127.0.0.1 --port "$port" --save "" --appendonly no \
    --dir "$LOCAL/redis" --logfile "$LOCAL/redis/redis.log" --pidfile "$LOCAL/redis/redis.pid" >/dev/null
  wait_for_port 127.0.0.1 "$port" 30 Redis
}

start_rabbitmq() {
  local port="$SECKILL_AMQP_PORT" base="$LOCAL/rabbitmq" node="${SECKILL_AMQP_NODENAME:-seckill@localhost}" home
  if port_open 127.0.0.1 "$port"; then
    log "RabbitMQ: already listening on 127.0.0.1:$port, using it"
    return
  fi
  log "RabbitMQ: starting node $node on 127.0.0.1:$port (data in $base)"
  mkdir -p "$base/mnesia" "$base/log"
  # Our own config and env files, so nothing under /etc/rabbitmq changes what we start.
  printf 'listeners.tcp.default = 127.0.0.1:%s\nloopback_users.guest = true\n' "$port" >"$base/rabbitmq.conf"
  printf '[].\n' >"$base/enabled_plugins"
  : >"$base/rabbitmq-env.conf"
  home="$base"
  if [[ $(id -u) -eq 0 ]]; then
    # Debian's rabbitmq user keeps its Erlang cookie in its home, so `rabbitmqctl -n NODE` works as usual.
    home="$(getent passwd rabbitmq | cut -d: -f6)"
    [[ -d "$home" ]] || home="$base"
    own_by rabbitmq "$base"
  fi
  # Every quorum queue holds a few file descriptors and the test suite declares a few hundred
  # queues over a run: lift the soft limit (1024 by default) as far as the hard one allows.
  ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
  (cd "$base" && run_as rabbitmq env HOME="$home" \
    RABBITMQ_NODENAME="$node" RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT="$port" \
    RABBITMQ_DIST_PORT="$((port + 20000))" ERL_EPMD_ADDRESS=127.0.0.1 \
    RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" \
    RABBITMQ_CONF_ENV_FILE="$base/rabbitmq-env.conf" RABBITMQ_CONFIG_FILE="$base/rabbitmq.conf" \
    RABBITMQ_ENABLED_PLUGINS_FILE="$base/enabled_plugins" \
    RABBITMQ_MNESIA_BASE="$base/mnesia" RABBITMQ_LOG_BASE="$base/log" \
    /usr/lib/rabbitmq/bin/rabbitmq-server -detached >"$base/log/startup.log" 2>&1) \
    || { cat "$base/log/startup.log" >&2; die "rabbitmq-server did not start"; }
  wait_for_port 127.0.0.1 "$port" 90 RabbitMQ \
    || { tail -n 30 "$base"/log/*.log >&2; die "RabbitMQ did not open its port"; }
}

start_etcd() {
  local port="$SECKILL_ETCD_PORT" peer=$((SECKILL_ETCD_PORT + 1)) bin
  if port_open 127.0.0.1 "$port"; then
    log "etcd: already listening on 127.0.0.1:$port, using it"
  else
    bin="$(command -v etcd || echo /usr/bin/etcd)"
    [[ -x "$bin" ]] || die "etcd binary not found"
    log "etcd: starting on 127.0.0.1:$port (data in $LOCAL/etcd, log $LOCAL/etcd.log)"
    # setsid + nohup: etcd outlives this script and the terminal that ran it.
    setsid nohup "$bin" --name seckill --data-dir "$LOCAL/etcd" \
      --listen-client-urls "http://127.0.0.1:$port" --advertise-client-urls "http://127.0.0.1:$port" \
      --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
      --initial-cluster "seckill=http://127.0.0.1:$peer" \
      >>"$LOCAL/etcd.log" 2>&1 </dev/null &
    echo $! >"$LOCAL/etcd.pid"
    wait_for_port 127.0.0.1 "$port" 30 etcd || { tail -n 20 "$LOCAL/etcd.log" >&2; die "etcd did not start"; }
  fi
  curl -fsS --max-time 5 "http://127.0.0.1:$port/version" >/dev/null || die "etcd on port $port does not answer /version"
}

# --------------------------------------------------------------------------------------------
# 3. Rust and wasm tools.
# --------------------------------------------------------------------------------------------
setup_rust() {
  command -v rustup >/dev/null || die "rustup not found (the default stable toolchain builds the server)"
  local rustc_path prefix
  if rustup toolchain list | grep -q '^debian-web'; then
    log "Rust: toolchain debian-web already linked"
  else
    rustc_path="$(dpkg -L rustc-web 2>/dev/null | grep -E '/bin/rustc$' | head -n1 || true)"
    prefix="$(dirname "$(dirname "${rustc_path:-/usr/bin/rustc}")")"
    [[ -x "$prefix/bin/rustc" && -d "$prefix/lib/rustlib" ]] || die "rustc-web not found under $prefix"
    log "Rust: linking rustup toolchain debian-web -> $prefix (Debian rustc-web)"
    rustup toolchain link debian-web "$prefix"
  fi
  rustc +debian-web --print target-list | grep -qx wasm32-unknown-unknown \
    || die "toolchain debian-web has no wasm32-unknown-unknown target"

  local comps missing=()
  comps="$(rustup component list --installed 2>/dev/null || true)"
  grep -q '^clippy' <<<"$comps" || missing+=(clippy)
  grep -q '^rustfmt' <<<"$comps" || missing+=(rustfmt)
  if ((${#missing[@]})); then
    log "Rust: adding components ${missing[*]} to the default toolchain"
    rustup component add "${missing[@]}"
  else
    log "Rust: clippy and rustfmt present"
  fi

  # wasm-bindgen-cli must match the wasm-bindgen crate exactly (the generated JS glue is versioned).
  local want have t0
  want="$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/[^0-9.]/, "", $0); print; exit }' "$SECKILL_ROOT/Cargo.lock")"
  [[ -n "$want" ]] || die "cannot read the wasm-bindgen version from Cargo.lock"
  have="$(wasm-bindgen --version 2>/dev/null | awk '{ print $2 }' || true)"
  if [[ "$have" == "$want" ]]; then
    log "wasm-bindgen-cli $want present"
  else
    # Without --locked: one of its locked dependencies is no longer on crates.io.
    log "wasm-bindgen-cli: installing $want (was: ${have:-none}; several CPU-minutes)"
    t0=$(now_s)
    cargo install --quiet --force wasm-bindgen-cli --version "=$want"
    log "wasm-bindgen-cli: installed in $(($(now_s) - t0))s"
  fi
}

setup_node_tools() {
  command -v npm >/dev/null || die "npm not found"
  local binaryen="132" have
  have="$(node -p "require('$SECKILL_TOOLS_DIR/node_modules/binaryen/package.json').version" 2>/dev/null || true)"
  if [[ "$have" == "$binaryen".* ]]; then
    log "wasm-opt: npm binaryen $have present"
  else
    log "wasm-opt: installing npm binaryen@$binaryen into $SECKILL_TOOLS_DIR"
    mkdir -p "$SECKILL_TOOLS_DIR"
    # Errors reach the log (a failed download must say why, not end the script mutely).
    npm install --prefix "$SECKILL_TOOLS_DIR" --no-audit --no-fund --loglevel=error "binaryen@$binaryen" >/dev/null
  fi
  mkdir -p "$SECKILL_TOOLS_DIR/bin"
  ln -sfn ../node_modules/.bin/wasm-opt "$SECKILL_TOOLS_DIR/bin/wasm-opt"
  [[ "$(command -v wasm-opt)" == "$SECKILL_TOOLS_DIR/bin/wasm-opt" ]] || die "wasm-opt on PATH is $(command -v wasm-opt), not npm binaryen's"

  # Browser test dependencies (playwright-core; Debian chromium is the browser).
  local dir="$SECKILL_ROOT/tests/browser" sum
  sum="$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)"
  if [[ -d "$dir/node_modules" && "$(cat "$dir/node_modules/.seckill-lock.sha256" 2>/dev/null)" == "$sum" ]]; then
    log "browser test: node modules up to date"
  else
    log "browser test: npm ci in tests/browser"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    echo "$sum" >"$dir/node_modules/.seckill-lock.sha256"
  fi
}

# The OpenAPI tests run schemathesis against a live server and drive one through a client
# that openapi-python-client generates from its document; a venv each keeps them off the
# system Python and out of each other's dependencies.
setup_python_tools() {
  python_tool schemathesis 4.32.5 "$SECKILL_SCHEMATHESIS" "schemathesis"
  python_tool openapi-python-client 0.29.1 "$SECKILL_OPENAPI_PYTHON_CLIENT" "openapi-python-client"
}

# python_tool PACKAGE VERSION BINARY VENV_NAME: PACKAGE==VERSION in its own venv, unless
# BINARY already says it is that version.
python_tool() {
  local package="$1" version="$2" binary="$3" venv="$SECKILL_CACHE_DIR/$4"
  if [[ "$("$binary" --version 2>/dev/null)" == *" $version" ]]; then
    log "$package: $version present"
    return
  fi
  log "$package: installing $version into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "$package==$version"
  [[ "$("$binary" --version)" == *" $version" ]] || die "$package at $binary is not $version"
}

# Usage: setup.sh [packages] [services] [rust] [node] [python]   (no argument: all of them, in this order)
steps=("$@")
((${#steps[@]})) || steps=(packages services rust node python)
for step in "${steps[@]}"; do
  case "$step" in
    packages) install_packages ;;
    services) start_postgres; start_redis; start_rabbitmq; start_etcd ;;
    rust) setup_rust ;;
    node) setup_node_tools ;;
    python) setup_python_tools ;;
    *) die "unknown step '$step' (packages, services, rust, node, python)" ;;
  esac
done
