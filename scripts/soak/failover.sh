#!/usr/bin/env bash
# The forward journal's failover soak: ROUNDS lossy asynchronous failovers (default 50), each
# on a new primary + standby (scripts/cluster/postgres.sh) with two `idemgate serve` processes
# and their journals: the integration test journal_failover with IDEMGATE_FAILOVER_ROUNDS.
# Wrong answers in a round do not stop the next rounds. Prints one summary line (rounds,
# keys checked, double executions, failed rounds, wall time); exits 1 if a round failed or a
# key ran twice.
#
#   scripts/soak/failover.sh [ROUNDS]        (about 10 s a round)
# Needs PostgreSQL's server binaries (/usr/lib/postgresql/*/bin) and the test database of
# IDEMGATE_TEST_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test).
# The test's output goes to OUT (default /tmp/idemgate-soak-failover.log); a failed round
# keeps the gateways' logs and journals and the servers' logs, and the output says where.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-50}
out=${OUT:-/tmp/idemgate-soak-failover.log}
export IDEMGATE_TEST_DATABASE_URL=${IDEMGATE_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}
started=$(date +%s)
status=0
IDEMGATE_FAILOVER_ROUNDS=$rounds cargo test -p idemgate-gateway --test integration \
  journal_failover:: -- --nocapture >"$out" 2>&1 || status=$?
secs=$(($(date +%s) - started))

sum() { # PATTERN FIELD: the sum of FIELD over the round lines matching PATTERN
  grep -Eo "$1" "$out" | awk -v f="$2" '{ s += $f } END { print s + 0 }'
}
done_rounds=$(grep -Ec '^failover round [0-9]+: [0-9]+ keys' "$out" || true)
keys=$(sum '^failover round [0-9]+: [0-9]+ keys' 4)
doubles=$(sum '^failover round [0-9]+: [0-9]+ keys, [0-9]+ double' 6)
lost=$(sum '^failover round [0-9]+: [0-9]+ keys, [0-9]+ double executions, [0-9]+ lost' 9)
raced=$(grep -Eo '^failover round [0-9]+: [0-9]+ keys, .* [0-9]+ answers 503 first' "$out" |
  awk '$14 > 0 { n++ } END { print n + 0 }')
restored=$(grep -Eo '^failover round [0-9]+: the journals restored [0-9]+ \(A\) \+ [0-9]+' "$out" |
  awk '{ s += $7 + $10 } END { print s + 0 }')
if grep -q '^skipping' "$out" && [ "$done_rounds" = 0 ]; then
  echo "failover soak: skipped: $(grep -m1 '^skipping' "$out")" >&2
  exit 2
fi
failed=$(grep -Ec '^failover round [0-9]+: [0-9]+ wrong answers' "$out" || true)
result=passed
[ "$status" = 0 ] && [ "$doubles" = 0 ] && [ "$done_rounds" = "$rounds" ] || result="FAILED (see $out)"
echo "failover soak: $done_rounds of $rounds rounds, $keys keys checked ($lost lost by the failovers, $restored restored by the journals), $doubles double executions, $failed rounds with wrong answers, $raced rounds with 503s before the replays, ${secs}s: $result"
if [ "$result" != passed ]; then
  grep -E "panicked|wrong answers|executed [0-9]+ times|are kept in|^error" "$out" | head -n 40 >&2 || true
  exit 1
fi
