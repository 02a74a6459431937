#!/usr/bin/env bash
# The cost of a fresh key as records pile up: seeds the store with N completed records, then
# runs wrk (random keys, spread over the key space) against `idemgate serve` and reports
# requests/s and the gateway's CPU per request for each round.
#
#   cargo build --release && scripts/bench/scale.sh sqlite 10000000     (from the project root)
#   scripts/bench/scale.sh postgres 1000
# Needs wrk, nginx-light, libnginx-mod-http-echo, curl, python3 (and psql for postgres).
# Knobs: ROUNDS=3 DURATION=8 CONNS=32 THREADS=2 OUT=/tmp/scale-<store>-<n> IDEMGATE_BIN
#        PG_URL (default postgres://postgres@127.0.0.1:5432/test; the run creates, then drops,
#        the table idemgate_scale_<pid> and its migration log); ports GATEWAY_PORT UPSTREAM_PORT
#        (18101 18080; nginx also takes the next two).
set -euo pipefail
. "$(dirname "$0")/common.sh"
ST=${1:?store: sqlite or postgres} N=${2:?records to seed}
need wrk nginx curl python3
ROUNDS=${ROUNDS:-3} DUR=${DURATION:-8} GW_PORT=${GATEWAY_PORT:-18101} UP=${UPSTREAM_PORT:-18080}
BIN=$(realpath "${IDEMGATE_BIN:-target/release/idemgate}")
[ -x "$BIN" ] || die "no idemgate binary at $BIN (cargo build --release, or set IDEMGATE_BIN)"
OUT=${OUT:-/tmp/scale-$ST-$N}; rm -rf "$OUT"; mkdir -p "$OUT"
PG_URL=${PG_URL:-postgres://postgres@127.0.0.1:5432/test} TABLE=idemgate_scale_$$
cleanup() {
  stop_started
  case $ST in
    sqlite) rm -f "$OUT"/idemgate.db* ;;
    postgres) psql -q "$PG_URL" -c "DROP TABLE IF EXISTS $TABLE, ${TABLE}_migrations, ${TABLE}_failovers" >/dev/null 2>&1 || true ;;
  esac
}
trap cleanup EXIT
trap 'exit 130' INT TERM
start_upstream "$OUT/nginx" "$UP" $((UP + 1)) $((UP + 2))
case $ST in
  sqlite) SU="sqlite://$OUT/idemgate.db"; EXTRA="" ;;
  postgres) need psql; SU=$PG_URL; EXTRA="store_table = \"$TABLE\"" ;;
  *) die "store must be sqlite or postgres" ;;
esac
write_gateway_conf "$OUT/gw.toml" "$GW_PORT" "$UP" "$SU" "$EXTRA"
start_gateway() {
  (cd "$OUT" && RUST_LOG=warn exec "$BIN" serve --config gw.toml) >>"$OUT/log" 2>&1 &
  GW=$!; remember_pid "$GW"; wait_port "$GW_PORT"
}
# One request creates the schema and a record whose principal and route the seed copies.
start_gateway
curl -sf -o /dev/null -X POST -H 'Idempotency-Key: scale-probe-0001' -H 'Content-Type: application/json' \
  -d '{}' "http://127.0.0.1:$GW_PORT/v1/payments" || die "probe request failed (see $OUT/log)"
kill "$GW"; wait "$GW" 2>/dev/null || true
t0=$(date +%s)
case $ST in
  sqlite) python3 "$BENCH_DIR/seed_sqlite.py" "$OUT/idemgate.db" "$N" ;;
  postgres) psql -q "$PG_URL" -v ON_ERROR_STOP=1 <<SQL
INSERT INTO $TABLE (user_id, route, key, request_hash, fingerprint_version, state, status,
  response, replayable, fence, created_at, completed_at, expires_at)
SELECT p.user_id, p.route, md5(g::text), sha256(g::text::bytea), 1, 'completed', 201,
  convert_to('{"id":"pay_1","amount":100}', 'UTF8'), true, 1, now(), now(), now() + interval '1 day'
FROM generate_series(1, $N) g, (SELECT user_id, route FROM $TABLE LIMIT 1) p;
VACUUM ANALYZE $TABLE;
SQL
  ;;
esac
log "seeded $N records in $(($(date +%s) - t0)) s"
start_gateway
TCK=$(getconf CLK_TCK)
ticks() { sed 's/^.*) //' "/proc/$GW/stat" | awk '{print $12 + $13}'; }
for r in $(seq "$ROUNDS"); do
  wrk -t"${THREADS:-2}" -c"${CONNS:-32}" -d2s -s "$BENCH_DIR/wrk/idem.lua" "http://127.0.0.1:$GW_PORT/v1/payments" -- random >/dev/null
  c0=$(ticks)
  line=$(wrk -t"${THREADS:-2}" -c"${CONNS:-32}" -d"${DUR}s" -s "$BENCH_DIR/wrk/idem.lua" "http://127.0.0.1:$GW_PORT/v1/payments" -- random | grep WRKJSON)
  c1=$(ticks)
  python3 - "$r" "$line" "$c0" "$c1" "$TCK" <<'PY'
import json, sys
r, line, c0, c1, tck = sys.argv[1], json.loads(sys.argv[2][8:]), *map(float, sys.argv[3:])
n = line["requests"]
print(f"round {r}: {line['rps']:.0f} req/s, p50 {line['p50_ms']} ms, non-2xx {line['non2xx3xx']}, "
      f"gateway CPU {(c1 - c0) * 1e6 / tck / n:.0f} us/request")
PY
done | tee "$OUT/results.txt"
