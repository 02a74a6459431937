#!/usr/bin/env bash
# What duplicates waiting on one key (`on_in_flight = "wait"`) cost the other keys: wrk
# sends fresh keys to `idemgate serve` for R rounds of D s alone and R beside W duplicates
# of one key whose first request runs for the whole round (they wait, holding their
# connections), alternating. Prints, for each phase, the medians of the rounds: requests
# per second, p99, gateway CPU per request (µs, from /proc), and the store's connections
# (PostgreSQL: pg_stat_activity of the database; Redis: CLIENT LIST), with the waiters
# gauge the gateway reports.
#
#   scripts/bench/waiters.sh [-s sqlite|postgres|redis] [-w W] [-d D] [-r R] [-B]   (project root)
#     -s store (sqlite)   -w waiters (1000)   -d seconds a round (10)   -r rounds (3)
#     -B skip `cargo build --release -p idemgate-gateway` (IDEMGATE_BIN names another binary)
# The upstream is `idemgate demo-api` of the same binary. PostgreSQL: DATABASE_URL (default
# postgres://postgres@127.0.0.1:5432/test), its own table, dropped after. Redis: REDIS_URL
# (default redis://127.0.0.1:6379), its own key prefix, deleted after. Ports GATEWAY_PORT
# UPSTREAM_PORT ADMIN_PORT (18641 18642 18643). Needs wrk, python3 (psql, redis-cli for
# those stores). Stops exactly the processes it started.
set -euo pipefail
. "$(dirname "$0")/common.sh"
STORE=sqlite W=1000 D=10 R=3 BUILD=1
while getopts "s:w:d:r:Bh" o; do
  case $o in
    s) STORE=$OPTARG ;; w) W=$OPTARG ;; d) D=$OPTARG ;; r) R=$OPTARG ;; B) BUILD=0 ;;
    *) sed -n '2,17p' "$0"; exit 2 ;;
  esac
done
need wrk python3
GW=${GATEWAY_PORT:-18641} UP=${UPSTREAM_PORT:-18642} ADM=${ADMIN_PORT:-18643}
for p in "$GW" "$UP" "$ADM"; do port_free "$p" || die "port $p busy"; done
if [ -z "${IDEMGATE_BIN:-}" ]; then
  [ "$BUILD" = 1 ] && cargo build --release -p idemgate-gateway >&2
  IDEMGATE_BIN=${CARGO_TARGET_DIR:-target}/release/idemgate
fi
BIN=$(realpath "$IDEMGATE_BIN")
ulimit -n "$(ulimit -Hn)"
OUT=$(mktemp -d /tmp/idemgate-waiters.XXXXXX)
DB=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}
RD=${REDIS_URL:-redis://127.0.0.1:6379}
TABLE="bench_waiters_$$" PREFIX="bench-waiters-$$:"
cleanup() {
  stop_started
  case $STORE in
    postgres) psql "$DB" -qc "DROP TABLE IF EXISTS $TABLE, ${TABLE}_migrations, ${TABLE}_failovers" >/dev/null 2>&1 || true ;;
    redis) redis-cli -u "$RD" --scan --pattern "$PREFIX*" | xargs -r redis-cli -u "$RD" del >/dev/null || true ;;
  esac
  rm -rf "$OUT"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

case $STORE in
  sqlite) url="sqlite://$OUT/idemgate.db" extra="" ;;
  postgres) need psql; url=$DB extra="store_table = \"$TABLE\"" ;;
  redis) need redis-cli; url=$RD extra="store_key_prefix = \"$PREFIX\"" ;;
  *) die "unknown store $STORE" ;;
esac
cat >"$OUT/gateway.toml" <<TOML
listen = "127.0.0.1:$GW"
admin_listen = "127.0.0.1:$ADM"
upstream = "http://127.0.0.1:$UP"
store = "$url"
$extra
upstream_timeout = "900s"
[defaults]
allow_anonymous = true
on_in_flight = "wait"
max_wait = "900s"
TOML

(RUST_LOG=warn exec "$BIN" demo-api --listen "127.0.0.1:$UP") >"$OUT/upstream.log" 2>&1 &
remember_pid $!
wait_port "$UP"
(exec "$BIN" serve --config "$OUT/gateway.toml") >"$OUT/gateway.log" 2>&1 &
GW_PID=$!
remember_pid $GW_PID
wait_port "$GW"

cpu_ticks() { local f; f=$(sed 's/^.*) //' "/proc/$1/stat"); set -- $f; echo $((${12} + ${13})); }
store_conns() {
  case $STORE in
    postgres) psql "$DB" -Atc "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()" ;;
    redis) redis-cli -u "$RD" CLIENT LIST | wc -l ;;
    *) echo 0 ;;
  esac
}
waiters_gauge() {
  curl -s "http://127.0.0.1:$ADM/metrics" | awk '/^idempotency_waiters /{print $2}' | tail -1
}
LUA="$BENCH_DIR/wrk/idem.lua"
round() { # PHASE N
  local t0 t1 line
  t0=$(cpu_ticks "$GW_PID")
  line=$(wrk -t2 -c32 -d"${D}s" --latency -s "$LUA" "http://127.0.0.1:$GW/payments" -- fresh | grep '^WRKJSON' | cut -c9-)
  t1=$(cpu_ticks "$GW_PID")
  python3 - "$1" "$2" "$line" "$((t1 - t0))" "$(getconf CLK_TCK)" "$(store_conns)" "$(waiters_gauge)" >>"$OUT/rounds.tsv" <<'PY'
import json, sys
phase, n, line, ticks, hz, conns, gauge = sys.argv[1:]
w = json.loads(line)
cpu_us = int(ticks) / int(hz) * 1e6 / max(w["requests"], 1)
print(f"{phase}\t{n}\t{w['rps']:.0f}\t{w['p99_ms']:.2f}\t{cpu_us:.1f}\t{conns}\t{gauge or 0}")
PY
}
log "warm-up"
wrk -t2 -c32 -d3s -s "$LUA" "http://127.0.0.1:$GW/payments" -- fresh >/dev/null
cat >"$OUT/waiters.py" <<'PY'
"""One first request that runs for the whole benchmark, then W duplicates that wait on it."""
import asyncio, sys, uuid
PORT, W = int(sys.argv[1]), int(sys.argv[2])
KEY = "bench-waited-" + uuid.uuid4().hex
BODY = b'{"amount":1000,"currency":"EUR"}'
def head(path):
    return (f"POST {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
            f"Idempotency-Key: {KEY}\r\nContent-Length: {len(BODY)}\r\n\r\n").encode() + BODY
async def send(path):
    r, w = await asyncio.open_connection("127.0.0.1", PORT)
    w.write(head(path)); await w.drain()
    await r.read(1)  # holds the connection until an answer starts
async def main():
    first = asyncio.create_task(send("/payments?delay_ms=3600000"))
    await asyncio.sleep(1)
    waiting = []
    for i in range(W):
        waiting.append(asyncio.create_task(send("/payments?delay_ms=3600000")))
        if i % 100 == 99:
            await asyncio.sleep(0.05)
    print("started", flush=True)
    await asyncio.gather(first, *waiting)
asyncio.run(main())
PY
start_waiters() {
  (exec python3 "$OUT/waiters.py" "$GW" "$W") >"$OUT/waiters.log" 2>&1 &
  WAITERS_PID=$!
  remember_pid $WAITERS_PID
  for _ in $(seq 100); do [ "$(waiters_gauge)" = "$W" ] && break; sleep 0.2; done
  [ "$(waiters_gauge)" = "$W" ] || die "the gateway reports $(waiters_gauge) waiters, not $W"
}
stop_waiters() {
  kill "$WAITERS_PID" 2>/dev/null || true
  wait "$WAITERS_PID" 2>/dev/null || true
  for _ in $(seq 100); do [ "$(waiters_gauge)" = 0 ] && break; sleep 0.2; done
  [ "$(waiters_gauge)" = 0 ] || die "the gateway still reports $(waiters_gauge) waiters"
}
# Rounds alternate (alone, then beside the waiters), so a drift of the machine falls on both.
for i in $(seq "$R"); do
  log "alone, round $i"; round alone "$i"
  start_waiters; log "$W waiting"
  log "beside $W waiters, round $i"; round waiting "$i"
  stop_waiters
done

python3 - "$OUT/rounds.tsv" "$STORE" "$W" <<'PY'
import statistics as st, sys
rows = [l.split("\t") for l in open(sys.argv[1]).read().splitlines()]
print(f"store {sys.argv[2]}, medians of {len(rows)//2} rounds; fresh keys on wrk -t2 -c32")
print(f"{'phase':8} {'req/s':>8} {'p99 ms':>8} {'CPU µs/req':>11} {'store conns':>12} {'waiters':>8}  rounds (req/s)")
base = None
for phase in ("alone", "waiting"):
    r = [x for x in rows if x[0] == phase]
    med = lambda i: st.median(float(x[i]) for x in r)
    print(f"{phase:8} {med(2):8.0f} {med(3):8.2f} {med(4):11.1f} {med(5):12.0f} {med(6):8.0f}  {[int(float(x[2])) for x in r]}")
    if base is None:
        base = (med(2), med(4))
    else:
        print(f"waiting/alone: req/s {med(2)/base[0]:.3f}, CPU per request {med(4)/base[1]:.3f}")
PY
