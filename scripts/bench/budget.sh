#!/usr/bin/env bash
# The instruction budget: user-space instructions per request of the release build, counted
# by callgrind (scripts/bench/callgrind.sh: exact, whatever else the machine does), for the
# proxy alone (memory pass: a POST without a key), memory fresh and replay, SQLite fresh and
# replay, against the baseline committed in scripts/bench/budget.txt. Fails when a scenario
# costs more than BUDGET_TOLERANCE_PCT (5) % over its baseline (a count over it is measured
# once more and the lower one kept: scheduling adds a little, never takes away); says when
# one costs that much less (update the baseline then, to keep the gain).
#
#   scripts/bench/budget.sh                      (project root; builds the release binary)
#   scripts/bench/budget.sh --update "why"       rewrite budget.txt with this build's counts
#
# A change that must cost more updates the baseline in the same commit, with its reason.
# Needs valgrind, nginx-light, libnginx-mod-http-echo, python3. IDEMGATE_BIN runs another
# binary (no build).
set -euo pipefail
. "$(dirname "$0")/common.sh"
BASELINE="$BENCH_DIR/budget.txt" TOLERANCE=${BUDGET_TOLERANCE_PCT:-5}
SCENARIOS=("memory pass" "memory fresh" "memory replay" "sqlite fresh" "sqlite replay")
UPDATE="" REASON=""
if [ "${1:-}" = "--update" ]; then
  UPDATE=1 REASON=${2:?--update needs the reason the cost changed}
fi
if [ -z "${IDEMGATE_BIN:-}" ]; then
  cargo build --release -p idemgate-gateway >&2
  export IDEMGATE_BIN=${CARGO_TARGET_DIR:-target}/release/idemgate
fi

RUN_LOG=$(mktemp /tmp/idemgate-budget.XXXXXX)
trap 'rm -f "$RUN_LOG"' EXIT

# count STORE MODE: instructions per request of one run (its output kept in RUN_LOG)
count() {
  "$BENCH_DIR/callgrind.sh" "$1" "$2" 2>&1 | tee "$RUN_LOG" \
    | sed -n 's/^.*: \([0-9]*\) instructions per request$/\1/p' | tail -n1
}

# baseline STORE MODE: the committed count, empty when the scenario has none
baseline() { [ -f "$BASELINE" ] && awk -v s="$1" -v m="$2" '$1 == s && $2 == m { print $3 }' "$BASELINE" || true; }

declare -A measured
failed=0
printf '%-16s %12s %12s %9s\n' scenario baseline measured change >&2
for scenario in "${SCENARIOS[@]}"; do
  read -r st mode <<<"$scenario"
  n=$(count "$st" "$mode")
  [ -n "$n" ] || die "no count for $scenario: $(tail -n5 "$RUN_LOG")"
  base=$(baseline "$st" "$mode")
  if [ -z "$UPDATE" ] && [ -n "$base" ] && [ "$n" -gt $((base * (100 + TOLERANCE) / 100)) ]; then
    again=$(count "$st" "$mode")
    [ -n "$again" ] && [ "$again" -lt "$n" ] && n=$again
  fi
  measured[$scenario]=$n
  if [ -z "$base" ]; then
    printf '%-16s %12s %12s %9s\n' "$scenario" - "$n" new >&2
    [ -n "$UPDATE" ] || { log "no baseline for $scenario in $BASELINE"; failed=1; }
    continue
  fi
  change=$(awk -v n="$n" -v b="$base" 'BEGIN { printf "%+.1f%%", (n - b) * 100 / b }')
  printf '%-16s %12s %12s %9s\n' "$scenario" "$base" "$n" "$change" >&2
  [ -n "$UPDATE" ] && continue
  if [ "$n" -gt $((base * (100 + TOLERANCE) / 100)) ]; then
    log "over budget: $scenario costs $change instructions per request (limit +$TOLERANCE%)"
    failed=1
  elif [ "$n" -lt $((base * (100 - TOLERANCE) / 100)) ]; then
    log "$scenario costs $change: keep the gain with scripts/bench/budget.sh --update \"why\""
  fi
done

if [ -n "$UPDATE" ]; then
  {
    echo "# Instructions per request (callgrind, release build), checked by scripts/bench/budget.sh."
    echo "# Updated $(date -u +%Y-%m-%d): $REASON"
    for scenario in "${SCENARIOS[@]}"; do echo "$scenario ${measured[$scenario]}"; done
  } >"$BASELINE"
  log "wrote $BASELINE"
fi
exit "$failed"
