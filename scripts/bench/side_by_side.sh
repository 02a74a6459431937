#!/usr/bin/env bash
# One run, several proxies, the same upstream and load: ratios to the direct upstream per round,
# medians over rounds. Starts on 127.0.0.1 only: redis-server, nginx (upstream + plain proxy hop),
# the peer (ldclabs/idempotent-proxy, PEER_BIN, Redis) and idemgate (IDEMGATE_BIN) on each store
# in IDEMGATE_STORES; stops exactly those PIDs on exit.
#
#   cargo build --release && scripts/bench/side_by_side.sh        (from the project root)
# Needs wrk, nginx-light, libnginx-mod-http-echo, redis-server (Debian packages), curl, python3.
# PEER_BIN (optional): another idempotency proxy binary to run beside idemgate (its launch recipe
# in common.sh:start_peer is written for ldclabs/idempotent-proxy).
# Every gateway runs at the default log level (as users run it; IG_RUST_LOG overrides); the memory
# store's gateway also serves a POST without a key (ig_memory_nokey: its proxy alone).
# Knobs: DURATION=10 WARMUP_S=2 CONNS=32 THREADS=2 ROUNDS=3 IDEMGATE_STORES="sqlite redis memory"
#        OUT=/tmp/sbs-<ts>; ports: REDIS_PORT UPSTREAM_PORT LOGGED_PORT NGINX_PROXY_PORT PEER_PORT
#        IDEMGATE_PORT_BASE (defaults 16379 18080 18081 18082 18090 18100)
set -euo pipefail
. "$(dirname "$0")/common.sh"
need wrk nginx redis-server redis-cli curl python3
REDIS_PORT=${REDIS_PORT:-16379} UPSTREAM_PORT=${UPSTREAM_PORT:-18080} LOGGED_PORT=${LOGGED_PORT:-18081}
NGINX_PROXY_PORT=${NGINX_PROXY_PORT:-18082} PEER_PORT=${PEER_PORT:-18090}
ROUNDS=${ROUNDS:-3}
IDEMGATE_STORES=${IDEMGATE_STORES:-"sqlite redis memory"}
IDEMGATE_BIN=$(realpath "${IDEMGATE_BIN:-target/release/idemgate}")
[ -x "$IDEMGATE_BIN" ] || die "no idemgate binary at $IDEMGATE_BIN (cargo build --release, or set IDEMGATE_BIN)"
OUT=${OUT:-/tmp/sbs-$(date +%Y%m%d-%H%M%S)}
export DURATION=${DURATION:-10} WARMUP_S=${WARMUP_S:-2} CONNS=${CONNS:-32} THREADS=${THREADS:-2}
mkdir -p "$OUT"
trap 'stop_started' EXIT
trap 'exit 130' INT TERM
start_redis "$OUT/redis" "$REDIS_PORT"
start_upstream "$OUT/nginx" "$UPSTREAM_PORT" "$LOGGED_PORT" "$NGINX_PROXY_PORT" 1
declare -A PID URL
if [ -n "${PEER_BIN:-}" ]; then
  start_peer "$OUT/peer" "$PEER_BIN" "$PEER_PORT" "$REDIS_PORT" "$UPSTREAM_PORT" "$LOGGED_PORT"
  PID[peer]=$PEER_PID; URL[peer]="http://127.0.0.1:$PEER_PORT/URL_FAST"
fi
port=${IDEMGATE_PORT_BASE:-18100} # idemgate listens on the next ports, one per store
for st in $IDEMGATE_STORES; do
  port=$((port + 1)); d="$OUT/idemgate-$st"; mkdir -p "$d"
  case $st in
    sqlite) su="sqlite://$d/idemgate.db" ;;
    redis) su="redis://127.0.0.1:$REDIS_PORT"; ;;
    memory) su="memory://" ;;
    postgres) su="${PG_URL:-postgres://postgres@127.0.0.1:5432/test}" ;;
  esac
  cat >"$d/gw.toml" <<TOML
listen = "127.0.0.1:$port"
admin_listen = ""
upstream = "http://127.0.0.1:$UPSTREAM_PORT"
store = "$su"
[defaults]
allow_anonymous = true
TOML
  [ "$st" = redis ] && printf 'store_key_prefix = "sbs%s:"\n' "$port" | sed -i "4r /dev/stdin" "$d/gw.toml"
  (cd "$d" && exec env ${IG_RUST_LOG:+RUST_LOG=$IG_RUST_LOG} "$IDEMGATE_BIN" serve --config gw.toml) >"$d/log" 2>&1 &
  PID[ig_$st]=$!; remember_pid "${PID[ig_$st]}"; wait_port "$port"
  URL[ig_$st]="http://127.0.0.1:$port/v1/payments"
done
cpu_ticks() { local t=0 f; for p in "$@"; do [ -r /proc/$p/stat ] || continue; f=$(sed 's/^.*) //' /proc/$p/stat); set -- $f; t=$((t + ${12} + ${13})); done; echo $t; }
TCK=$(getconf CLK_TCK)
BODY='{"amount":100,"currency":"EUR","merchant":"m-42","note":"bench"}'
printf 'round\tscenario\trps\tp50_ms\tp90_ms\tp99_ms\tmax_ms\tnon2xx3xx\tsock_errors\tproxy_cpu_us\tredis_cpu_us\n' >"$OUT/results.tsv"
scen() { # round name url mode pid
  local r=$1 n=$2 u=$3 m=$4 p=${5:-$NGINX_PID} line p0 r0 p1 r1 reqs
  warm_wrk "$u" "$m"
  p0=$(cpu_ticks $p); r0=$(cpu_ticks $REDIS_PID)
  line=$(run_wrk "$n" "$u" "$m" "$OUT/r${r}_$n.txt")
  p1=$(cpu_ticks $p); r1=$(cpu_ticks $REDIS_PID)
  reqs=$(grep -o '"requests":[0-9]*' "$OUT/r${r}_$n.txt" | cut -d: -f2 || echo 0)
  c() { python3 -c "import sys;t,r,k=map(float,sys.argv[1:]);print(f'{t*1e6/k/r:.1f}' if r>0 else 'nan')" "$1" "${reqs:-0}" "$TCK"; }
  printf '%s\t%s\t%s\t%s\n' "$r" "$line" "$(c $((p1-p0)))" "$(c $((r1-r0)))" >>"$OUT/results.tsv"
  log "r$r $n: $(echo "$line" | cut -f2-4)"
}
for r in $(seq "$ROUNDS"); do
  scen "$r" a_direct "http://127.0.0.1:$UPSTREAM_PORT/v1/payments" fresh
  scen "$r" p_nginx_hop "http://127.0.0.1:$NGINX_PROXY_PORT/v1/payments" fresh
  for name in "${!URL[@]}"; do
    u=${URL[$name]}
    scen "$r" "${name}_fresh" "$u" fresh "${PID[$name]}"
    key="replay-$name-r$r-$(date +%s%N)"
    curl -s -o /dev/null -X POST -H "Idempotency-Key: $key" -H 'Content-Type: application/json' -d "$BODY" "$u"
    scen "$r" "${name}_replay" "$u" "fixed:$key" "${PID[$name]}"
    if [ "$name" = ig_memory ]; then scen "$r" ig_memory_nokey "$u" none "${PID[$name]}"; fi
  done
done
python3 - "$OUT/results.tsv" >"$OUT/summary.txt" <<'PY'
import csv, statistics as st, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
f = lambda x: float(x) if x not in ("", "nan") else float("nan")
by = {}
for r in rows: by.setdefault(r["scenario"], []).append(r)
direct = {r["round"]: f(r["rps"]) for r in rows if r["scenario"] == "a_direct"}
print(f'{"scenario":22} {"req/s":>8} {"x direct":>9} {"p50 ms":>7} {"p99 ms":>7} {"non2xx":>7} {"proxy us/req":>12} {"redis us/req":>12}  per-round ratios')
for s, rs in by.items():
    ratios = [f(r["rps"]) / direct[r["round"]] for r in rs]
    m = lambda k: st.median(f(r[k]) for r in rs)
    print(f'{s:22} {m("rps"):8.0f} {st.median(ratios):9.3f} {m("p50_ms"):7.2f} {m("p99_ms"):7.2f} {m("non2xx3xx"):7.0f} {m("proxy_cpu_us"):12.1f} {m("redis_cpu_us"):12.1f}  {[round(x,3) for x in ratios]}')
PY
cat "$OUT/summary.txt"
