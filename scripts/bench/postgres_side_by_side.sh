#!/usr/bin/env bash
# The PostgreSQL store beside its own database: pgbench running the store's exact statements
# (read back from pg_prepared_statements by the pgbench_scripts example) and the gateway on the
# same database, table and load, alternating in each round; ratios per round, medians over rounds.
#   fresh:  gateway new keys/s        / pgbench (insert of a new key + its outcome write, 2 commits)
#   replay: gateway replays/s         / pgbench (the insert statement on a stored key: 1 round trip)
#   read:   pgbench of the read inside that statement alone (the record by its primary key),
#           the least a replay can cost, printed for reference
#
#   cargo build --release -p idemgate-gateway && cargo build --release -p idemgate-postgres --examples
#   scripts/bench/postgres_side_by_side.sh                        (from the project root)
# Needs pgbench and psql (postgresql-client), wrk, nginx-light, libnginx-mod-http-echo, curl,
# python3. Starts nginx (the upstream) and the gateway on 127.0.0.1, uses the table
# pgsbs_<pid> (created, dropped at exit) and stops exactly what it started.
# Knobs: PG_URL (postgres://postgres@127.0.0.1:5432/test) CLIENTS=32 (pgbench clients, wrk
#        connections) DURATION=10 WARMUP_S=2 ROUNDS=3 STORE_MAX_CONNECTIONS (the gateway's
#        store_max_connections; its default when unset) OUT=/tmp/pgsbs-<ts>
#        ports: UPSTREAM_PORT LOGGED_PORT NGINX_PROXY_PORT GATEWAY_PORT (18280 18281 18282 18290)
set -euo pipefail
. "$(dirname "$0")/common.sh"
need wrk nginx pgbench psql curl python3
PG_URL=${PG_URL:-postgres://postgres@127.0.0.1:5432/test}
UPSTREAM_PORT=${UPSTREAM_PORT:-18280} LOGGED_PORT=${LOGGED_PORT:-18281}
NGINX_PROXY_PORT=${NGINX_PROXY_PORT:-18282} GATEWAY_PORT=${GATEWAY_PORT:-18290}
ROUNDS=${ROUNDS:-3} CLIENTS=${CLIENTS:-32}
IDEMGATE_BIN=$(realpath "${IDEMGATE_BIN:-target/release/idemgate}")
SCRIPTS_BIN=$(realpath "${SCRIPTS_BIN:-target/release/examples/pgbench_scripts}")
for b in "$IDEMGATE_BIN" "$SCRIPTS_BIN"; do
  [ -x "$b" ] || die "no $b (cargo build --release -p idemgate-gateway; cargo build --release -p idemgate-postgres --examples)"
done
OUT=${OUT:-/tmp/pgsbs-$(date +%Y%m%d-%H%M%S)}
export DURATION=${DURATION:-10} WARMUP_S=${WARMUP_S:-2} CONNS=$CLIENTS THREADS=${THREADS:-2}
table=pgsbs_$$
mkdir -p "$OUT"
drop_table() {
  psql -q "$PG_URL" -c "DROP TABLE IF EXISTS \"$table\", \"${table}_migrations\", \"${table}_failovers\"" >/dev/null 2>&1 || true
}
trap 'stop_started; drop_table' EXIT
trap 'exit 130' INT TERM

IDEMGATE_BENCH_DATABASE_URL=$PG_URL "$SCRIPTS_BIN" "$table" "$OUT" >/dev/null
start_upstream "$OUT/nginx" "$UPSTREAM_PORT" "$LOGGED_PORT" "$NGINX_PROXY_PORT" 1
pool=${STORE_MAX_CONNECTIONS:+store_max_connections = $STORE_MAX_CONNECTIONS}
write_gateway_conf "$OUT/gw.toml" "$GATEWAY_PORT" "$UPSTREAM_PORT" "$PG_URL" "store_table = \"$table\"
$pool"
(cd "$OUT" && exec "$IDEMGATE_BIN" serve --config gw.toml) >"$OUT/gw.log" 2>&1 &
GW_PID=$!; remember_pid "$GW_PID"; wait_port "$GATEWAY_PORT"
URL="http://127.0.0.1:$GATEWAY_PORT/v1/payments"
BODY='{"amount":100,"currency":"EUR","merchant":"m-42","note":"bench"}'

cpu_ticks() { [ -r "/proc/$1/stat" ] || { echo 0; return; }; set -- $(sed 's/^.*) //' "/proc/$1/stat"); echo $((${12} + ${13})); }
TCK=$(getconf CLK_TCK)
printf 'round\tscenario\trate\tp50_ms\tgateway_cpu_us\n' >"$OUT/results.tsv"
gateway() { # round name mode
  local r=$1 n=$2 m=$3 c0 c1 line reqs us
  warm_wrk "$URL" "$m"
  c0=$(cpu_ticks "$GW_PID")
  line=$(run_wrk "$n" "$URL" "$m" "$OUT/r${r}_$n.txt")
  c1=$(cpu_ticks "$GW_PID")
  reqs=$(grep -o '"requests":[0-9]*' "$OUT/r${r}_$n.txt" | cut -d: -f2 || echo 0)
  us=$(python3 -c "import sys;t,r,k=map(float,sys.argv[1:]);print(f'{t*1e6/k/r:.1f}' if r>0 else 'nan')" $((c1 - c0)) "${reqs:-0}" "$TCK")
  [ "$(echo "$line" | cut -f7)" = 0 ] || log "WARNING r$r $n: non-2xx answers: $(echo "$line" | cut -f7)"
  printf '%s\t%s\t%s\t%s\t%s\n' "$r" "$n" "$(echo "$line" | cut -f2)" "$(echo "$line" | cut -f3)" "$us" >>"$OUT/results.tsv"
  log "r$r $n: $(echo "$line" | cut -f2) req/s, $us us CPU/req"
}
pgb() { # round name script
  local r=$1 n=$2 f=$3 tps lat
  pgbench "$PG_URL" -n -c "$CLIENTS" -j "$THREADS" -T "$DURATION" -M prepared -f "$OUT/$f" >"$OUT/r${r}_$n.txt" 2>&1 || true
  tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$OUT/r${r}_$n.txt")
  lat=$(sed -n 's/^latency average = \([0-9.]*\).*/\1/p' "$OUT/r${r}_$n.txt")
  grep -q '^number of failed transactions: 0 ' "$OUT/r${r}_$n.txt" || log "WARNING r$r $n: failed transactions"
  printf '%s\t%s\t%s\t%s\tnan\n' "$r" "$n" "${tps:-nan}" "${lat:-nan}" >>"$OUT/results.tsv"
  log "r$r $n: ${tps:-nan} tx/s"
}
for r in $(seq "$ROUNDS"); do
  key="replay-r$r-$(date +%s%N)"
  curl -s -o /dev/null -X POST -H "Idempotency-Key: $key" -H 'Content-Type: application/json' -d "$BODY" "$URL"
  pgb "$r" pgbench_fresh fresh.sql
  gateway "$r" gateway_fresh fresh
  pgb "$r" pgbench_replay replay.sql
  gateway "$r" gateway_replay "fixed:$key"
  pgb "$r" pgbench_read read.sql
done
python3 - "$OUT/results.tsv" >"$OUT/summary.txt" <<'PY'
import csv, statistics as st, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
f = lambda x: float(x) if x not in ("", "nan") else float("nan")
rate = {(r["round"], r["scenario"]): f(r["rate"]) for r in rows}
rounds = sorted({r["round"] for r in rows})
print(f'{"scenario":16} {"per s":>9} {"p50 / avg ms":>12} {"gateway us/req":>14}')
for s in dict.fromkeys(r["scenario"] for r in rows):
    rs = [r for r in rows if r["scenario"] == s]
    m = lambda k: st.median(f(r[k]) for r in rs)
    print(f'{s:16} {m("rate"):9.0f} {m("p50_ms"):12.2f} {m("gateway_cpu_us"):14.1f}')
for what, num, den in [("fresh", "gateway_fresh", "pgbench_fresh"),
                       ("replay", "gateway_replay", "pgbench_replay"),
                       ("replay vs plain read", "gateway_replay", "pgbench_read")]:
    ratios = [rate[(r, num)] / rate[(r, den)] for r in rounds]
    print(f'ratio {what:21} {st.median(ratios):.3f}  per round {[round(x, 3) for x in ratios]}')
PY
cat "$OUT/summary.txt"
