#!/usr/bin/env bash
# scripts/bench-control.sh: the "Switch propagation" benchmark, recorded in
# BENCHMARKS.md. Called by scripts/bench.sh; runs on its own too.
#
# Three seckill instances of one deployment (one database, Redis prefix and etcd prefix, all
# in one test process against the shared etcd at ETCD_ENDPOINTS) take BENCH_FLIPS flips of
# `limits/per_ip_per_window` through the control plane's flip service (audit row, etcd
# transaction with its write note). For each flip it measures, per instance, the time from
# just before the flip was sent to the instance having the new value in force (its
# `Switches` snapshot). In the same run, alternating flip by flip, it measures a bare etcd
# put of one key to the moment a watch on that key delivers the event. Targets: switch p99
# within 2x of the bare p99, and under 50 ms.
#
# The measuring code is the ignored test `control::switch_propagation_benchmark` in
# tests/api/control.rs.
#
# Knobs (environment): BENCH_FLIPS (300), BENCH_PROFILE (release; `dev` reuses the test
# build), BENCH_UPDATE_DOC (1: rewrite the result block of BENCHMARKS.md).

set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$SECKILL_ROOT"

FLIPS="${BENCH_FLIPS:-300}"
PROFILE="${BENCH_PROFILE:-release}"
UPDATE_DOC="${BENCH_UPDATE_DOC:-1}"
STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
RESULTS="$SECKILL_CACHE_DIR/bench/control-$STAMP"
mkdir -p "$RESULTS"

profile_flag=()
[[ "$PROFILE" == "release" ]] && profile_flag=(--release)

log "building the test binary ($PROFILE)"
cargo test "${profile_flag[@]}" -p seckill-tests --test api --no-run >"$RESULTS/build.log" 2>&1 \
  || { tail -n 30 "$RESULTS/build.log" >&2; die "build failed"; }
# Run the binary itself: a second `cargo test` could wait on the build lock or rebuild.
binary="$(sed -n 's/.*Executable api\/main.rs (\(.*\))$/\1/p' "$RESULTS/build.log" | tail -n 1)"
[[ -x "$binary" ]] || die "no test binary named in $RESULTS/build.log"

started="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
load_start="$(cut -d' ' -f1-3 /proc/loadavg)"
log "measuring $FLIPS flips over three instances against bare etcd put -> watch"
(cd tests && BENCH_FLIPS="$FLIPS" "$binary" control::switch_propagation_benchmark \
  --ignored --exact --nocapture) >"$RESULTS/run.log" 2>&1 \
  || { tail -n 30 "$RESULTS/run.log" >&2; die "benchmark failed"; }
load_end="$(cut -d' ' -f1-3 /proc/loadavg)"
finished="$(date -u +%Y-%m-%dT%H:%M:%SZ)"

line="$(grep -m1 '^BENCH switch_propagation' "$RESULTS/run.log")" || die "no result line in $RESULTS/run.log"
echo "$line"

python3 - "$line" "$SECKILL_ROOT/BENCHMARKS.md" "$UPDATE_DOC" "$started" "$finished" \
  "$load_start" "$load_end" "$(git rev-parse --short HEAD 2>/dev/null || echo '?')" \
  "$(nproc)" "$PROFILE" "$RESULTS" <<'PY'
import sys
line, doc, update, started, finished, load0, load1, commit, cores, profile, results = sys.argv[1:]
fields = dict(part.split("=", 1) for part in line.split()[2:])
f = {k: float(v) for k, v in fields.items() if k.endswith("_ms") or k == "p99_ratio"}
met_ratio = f["switch_p99_ms"] <= 2 * f["bare_p99_ms"]
met_abs = f["switch_p99_ms"] < 50
block = [
    f"Run {started} to {finished}, commit {commit}, {cores} cores, `{profile}` build, load average "
    f"{load0} at the start and {load1} at the end. Raw output: `{results}`.",
    "",
    f"| measurement ({fields['rounds']} rounds) | p50 ms | p99 ms | max ms |",
    "|---|---|---|---|",
    f"| switch flip → in force, each of {fields['instances']} instances | {f['switch_p50_ms']:.2f} | "
    f"{f['switch_p99_ms']:.2f} | {f['switch_max_ms']:.2f} |",
    f"| bare etcd put → watch event, one key | {f['bare_p50_ms']:.2f} | {f['bare_p99_ms']:.2f} | "
    f"{f['bare_max_ms']:.2f} |",
    "",
    f"p99 ratio {f['p99_ratio']:.2f} (target ≤ 2: {'met' if met_ratio else '**missed**'}); "
    f"switch p99 {f['switch_p99_ms']:.2f} ms (target < 50 ms: {'met' if met_abs else '**missed**'}).",
]
print("\n".join(block))
if update != "1":
    sys.exit(0)
begin, end = "<!-- bench-control.sh results: begin -->", "<!-- bench-control.sh results: end -->"
text = open(doc, encoding="utf-8").read()
if begin not in text or end not in text:
    sys.exit(f"markers {begin} / {end} missing from {doc}")
head, rest = text.split(begin, 1)
_, tail = rest.split(end, 1)
open(doc, "w", encoding="utf-8").write(head + begin + "\n" + "\n".join(block) + "\n" + end + tail)
PY
