#!/usr/bin/env bash
# User-space instructions per request of `idemgate serve`, counted by valgrind's callgrind:
# exact and repeatable whatever else the machine does, unlike seconds. Sequential POSTs on
# one keep-alive connection to an nginx upstream: 50 of warm-up, then the counters are zeroed
# and 500 more are counted. (valgrind has no SHA instructions: SHA-256 runs in software there
# and weighs far more than natively.)
#
#   cargo build --release && scripts/bench/callgrind.sh sqlite fresh      (from the project root)
#   scripts/bench/callgrind.sh redis replay
#   scripts/bench/callgrind.sh memory pass     (no Idempotency-Key: the proxy alone)
# Stores: memory, sqlite, redis (REDIS_URL, default redis://127.0.0.1:6379; the run's keys
# carry their own prefix and are deleted at the end), postgres (PG_URL, default
# postgres://postgres@127.0.0.1:5432/test; a table of the run's own, dropped at the end).
# Needs valgrind, nginx-light, libnginx-mod-http-echo, python3 (redis-cli for redis, psql for
# postgres). Knobs: IDEMGATE_BIN, GATEWAY_PORT UPSTREAM_PORT (18101 18080; nginx also takes the
# next two), CG_KEEP=DIR (keeps the callgrind output there, for callgrind_annotate),
# CG_DEFAULTS (lines added to the gateway's [defaults], e.g. to count a feature's cost:
# CG_DEFAULTS='store_response = "redacted"
# redact_json_pointers = ["/id"]'; the upstream answers {"id":"…","status":"created"}),
# CG_TOP (top-level lines put before the file's tables, e.g. to count encryption at rest:
# CG_TOP='encryption_key_files = ["/path/to/64-hex-digits.key"]').
set -euo pipefail
. "$(dirname "$0")/common.sh"
ST=${1:?store: memory, sqlite, redis or postgres} MODE=${2:?mode: fresh, replay or pass}
case $MODE in fresh|replay|pass) ;; *) die "mode must be fresh, replay or pass" ;; esac
need valgrind callgrind_control nginx python3
GW_PORT=${GATEWAY_PORT:-18101} UP=${UPSTREAM_PORT:-18080}
BIN=$(realpath "${IDEMGATE_BIN:-target/release/idemgate}")
[ -x "$BIN" ] || die "no idemgate binary at $BIN (cargo build --release, or set IDEMGATE_BIN)"
OUT=$(mktemp -d /tmp/idemgate-callgrind.XXXXXX) PREFIX="cg$$:"
REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379}
PG_URL=${PG_URL:-postgres://postgres@127.0.0.1:5432/test} TABLE="cg_$$"
cleanup() {
  stop_started
  [ "$ST" = redis ] && redis-cli -u "$REDIS_URL" --scan --pattern "$PREFIX*" | xargs -r redis-cli -u "$REDIS_URL" del >/dev/null
  [ "$ST" = postgres ] && psql -q "$PG_URL" -c "DROP TABLE IF EXISTS $TABLE, ${TABLE}_migrations, ${TABLE}_failovers" >/dev/null
  [ -n "${CG_KEEP:-}" ] && mkdir -p "$CG_KEEP" && cp "$OUT"/cg.out* "$CG_KEEP/"
  rm -rf "$OUT"
}
trap cleanup EXIT
start_upstream "$OUT/nginx" "$UP" $((UP + 1)) $((UP + 2))
EXTRA=""
case $ST in
  sqlite) SU="sqlite://$OUT/idemgate.db" ;;
  memory) SU="memory://" ;;
  redis) need redis-cli; SU=$REDIS_URL; EXTRA="store_key_prefix = \"$PREFIX\"" ;;
  postgres) need psql; SU=$PG_URL; EXTRA="store_table = \"$TABLE\"" ;;
  *) die "store must be memory, sqlite, redis or postgres" ;;
esac
write_gateway_conf "$OUT/gw.toml" "$GW_PORT" "$UP" "$SU" "$EXTRA"
[ -n "${CG_DEFAULTS:-}" ] && printf '%s\n' "$CG_DEFAULTS" >>"$OUT/gw.toml"
if [ -n "${CG_TOP:-}" ]; then
  { printf '%s\n' "$CG_TOP"; cat "$OUT/gw.toml"; } >"$OUT/gw.top" && mv "$OUT/gw.top" "$OUT/gw.toml"
fi
(cd "$OUT" && RUST_LOG=warn exec valgrind --tool=callgrind --callgrind-out-file="$OUT/cg.out" \
  "$BIN" serve --config gw.toml) >"$OUT/log" 2>&1 &
GW=$!; remember_pid "$GW"
wait_port "$GW_PORT" 120
post() { # COUNT
  python3 - "$MODE" "$1" "$GW_PORT" <<'PY'
import http.client, sys, uuid
mode, n, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
conn = http.client.HTTPConnection("127.0.0.1", port)
body = '{"amount":100,"currency":"EUR","merchant":"m-42","note":"bench"}'
for _ in range(n):
    headers = {"Content-Type": "application/json"}
    if mode != "pass":
        headers["Idempotency-Key"] = "callgrind-replay-key" if mode == "replay" else uuid.uuid4().hex
    conn.request("POST", "/v1/payments", body, headers)
    resp = conn.getresponse()
    resp.read()
    assert resp.status == 201, resp.status
PY
}
post 50
callgrind_control -z "$GW" >/dev/null
post 500
callgrind_control -d "$GW" >/dev/null
sleep 1
total=$(grep -h '^summary:' "$OUT"/cg.out.* | awk '{s += $2} END {print s}')
echo "$ST $MODE: $((total / 500)) instructions per request"
