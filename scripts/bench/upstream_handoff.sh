#!/usr/bin/env bash
# The upstream hand-off's cost: the bare proxy of examples/upstream_handoff.rs, `pooled`
# (hyper-util's client, the upstream connection in a task of its own, as the gateway) beside
# `pinned` (one upstream connection per client connection, polled by the client connection's
# task), against one nginx upstream; rounds alternate; prints req/s and CPU per request (µs,
# the proxy's utime+stime from /proc) per round and their medians. Stops what it started.
#
#   cargo build --release -p idemgate-gateway --example upstream_handoff
#   scripts/bench/upstream_handoff.sh            (from the project root)
# Knobs: DURATION=10 WARMUP_S=2 CONNS=32 THREADS=2 ROUNDS=3 OUT=/tmp/handoff-<ts>
#        ports: UPSTREAM_PORT LOGGED_PORT NGINX_PROXY_PORT PROXY_PORT_BASE (18380..18383, 18390)
set -euo pipefail
. "$(dirname "$0")/common.sh"
need wrk nginx python3
BIN=$(realpath "${HANDOFF_BIN:-target/release/examples/upstream_handoff}")
[ -x "$BIN" ] || die "no binary at $BIN (cargo build --release -p idemgate-gateway --example upstream_handoff)"
UPSTREAM_PORT=${UPSTREAM_PORT:-18380} LOGGED_PORT=${LOGGED_PORT:-18381} NGINX_PROXY_PORT=${NGINX_PROXY_PORT:-18382}
base=${PROXY_PORT_BASE:-18390}
export DURATION=${DURATION:-10} WARMUP_S=${WARMUP_S:-2} CONNS=${CONNS:-32} THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-3} OUT=${OUT:-/tmp/handoff-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
trap 'stop_started' EXIT
trap 'exit 130' INT TERM
start_upstream "$OUT/nginx" "$UPSTREAM_PORT" "$LOGGED_PORT" "$NGINX_PROXY_PORT" 1
declare -A PID PORT
for mode in pooled pinned; do
  base=$((base + 1)); PORT[$mode]=$base
  "$BIN" "$mode" "127.0.0.1:$base" "127.0.0.1:$UPSTREAM_PORT" >"$OUT/$mode.log" 2>&1 &
  PID[$mode]=$!; remember_pid "${PID[$mode]}"; wait_port "$base"
done
ticks() { sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
TCK=$(getconf CLK_TCK)
printf 'round\tmode\trps\tp50_ms\tp99_ms\tcpu_us\n' >"$OUT/results.tsv"
for r in $(seq "$ROUNDS"); do
  for mode in pooled pinned; do
    u="http://127.0.0.1:${PORT[$mode]}/v1/payments"
    warm_wrk "$u" none
    t0=$(ticks "${PID[$mode]}")
    line=$(run_wrk "$mode" "$u" none "$OUT/r${r}_$mode.txt")
    t1=$(ticks "${PID[$mode]}")
    reqs=$(grep -o '"requests":[0-9]*' "$OUT/r${r}_$mode.txt" | cut -d: -f2)
    cpu=$(python3 -c "import sys; t,n,k=map(float,sys.argv[1:]); print(f'{t*1e6/k/n:.1f}')" $((t1 - t0)) "$reqs" "$TCK")
    echo "$line" | awk -v r="$r" -v c="$cpu" -F'\t' '{printf "%s\t%s\t%s\t%s\t%s\t%s\n", r, $1, $2, $3, $5, c}' >>"$OUT/results.tsv"
    log "r$r $mode: $(echo "$line" | cut -f2) req/s, $cpu µs CPU per request"
  done
done
python3 - "$OUT/results.tsv" <<'PY' | tee "$OUT/summary.txt"
import csv, statistics as st, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
for mode in ("pooled", "pinned"):
    rs = [r for r in rows if r["mode"] == mode]
    m = lambda k: st.median(float(r[k]) for r in rs)
    print(f'{mode:7} {m("rps"):8.0f} req/s  p50 {m("p50_ms"):.3f} ms  p99 {m("p99_ms"):.3f} ms  CPU {m("cpu_us"):6.1f} us/req  per round {[r["cpu_us"] for r in rs]}')
PY
