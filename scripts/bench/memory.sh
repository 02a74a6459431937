#!/usr/bin/env bash
# Memory of `idemgate serve` (SQLite store) under held load: RSS (VmRSS of the gateway's own
# process, from /proc) per in-flight request, per idle keep-alive connection, and 30 s after
# the load ends against RSS before it. Two phases, each on a fresh gateway and database:
#  - in-flight: N connections, each one covered POST with its own Idempotency-Key to an
#    upstream that answers after DELAY s; RSS sampled while all are held (the peak); the
#    answers must all be 201; the connections closed.
#  - idle: M connections, each sending one covered POST (no delay, 128 at a time), then kept
#    open and silent; RSS once all are idle; the connections closed.
# Each phase starts after a warm-up (200 POSTs on 16 connections) and reports
# (RSS under load - RSS before) / N or M, and RSS AFTER s after its connections closed.
# The upstream is `idemgate demo-api` (`?delay_ms=`) of the same binary; the load comes from
# a Python asyncio client, a process of its own (its memory is not counted).
#
#   scripts/bench/memory.sh [-n N] [-m M] [-d DELAY] [-a AFTER] [-r RUNS] [-B]   (project root)
#     -n in-flight requests (3000)   -m idle connections (10000)   -d upstream delay, s (20)
#     -a wait after the load, s (30)  -r runs, medians printed (1)  -B skip `cargo build`
# Builds with `cargo build --release -p idemgate-gateway` (CARGO_TARGET_DIR is honoured);
# IDEMGATE_BIN runs another binary (no build). Ports GATEWAY_PORT UPSTREAM_PORT (18611
# 18612). Raises the open-file limit to the hard limit; needs about 2 N + 200 and M + 200
# descriptors. Needs python3. Stops exactly the processes it started.
set -euo pipefail
. "$(dirname "$0")/common.sh"
N=3000 M=10000 DELAY=20 AFTER=30 RUNS=1 BUILD=1
while getopts "n:m:d:a:r:Bh" o; do
  case $o in
    n) N=$OPTARG ;; m) M=$OPTARG ;; d) DELAY=$OPTARG ;; a) AFTER=$OPTARG ;; r) RUNS=$OPTARG ;;
    B) BUILD=0 ;; *) sed -n '2,21p' "$0"; exit 2 ;;
  esac
done
need python3
GW_PORT=${GATEWAY_PORT:-18611} UP_PORT=${UPSTREAM_PORT:-18612}
for p in "$GW_PORT" "$UP_PORT"; do port_free "$p" || die "port $p busy (GATEWAY_PORT, UPSTREAM_PORT)"; done
if [ -z "${IDEMGATE_BIN:-}" ]; then
  [ "$BUILD" = 1 ] && cargo build --release -p idemgate-gateway >&2
  IDEMGATE_BIN=${CARGO_TARGET_DIR:-target}/release/idemgate
fi
BIN=$(realpath "$IDEMGATE_BIN")
[ -x "$BIN" ] || die "no idemgate binary at $BIN"
ulimit -n "$(ulimit -Hn)"
want=$(( (2 * N > M ? 2 * N : M) + 200 ))
[ "$(ulimit -n)" -ge "$want" ] || die "open-file limit $(ulimit -n) < $want: lower -n/-m or raise the hard limit"
OUT=$(mktemp -d /tmp/idemgate-memory.XXXXXX)
trap 'stop_started; rm -rf "$OUT"' EXIT
trap 'exit 130' INT TERM

(RUST_LOG=warn exec "$BIN" demo-api --listen "127.0.0.1:$UP_PORT") >"$OUT/upstream.log" 2>&1 &
remember_pid $!
wait_port "$UP_PORT"

cat >"$OUT/client.py" <<'PY'
"""One phase of the memory benchmark against the gateway on PORT whose PID is given."""
import asyncio, json, statistics, sys, time, uuid

PHASE, PORT, PID, COUNT, DELAY, AFTER = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
BODY = b'{"amount":1000,"currency":"EUR"}'

def rss_kb(field="VmRSS:"):
    with open(f"/proc/{PID}/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith(field))

def fds():
    import os
    return len(os.listdir(f"/proc/{PID}/fd"))

def threads():
    with open(f"/proc/{PID}/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("Threads:"))

def request(delay_ms):
    path = f"/payments?delay_ms={delay_ms}" if delay_ms else "/payments"
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Idempotency-Key: mem-{uuid.uuid4().hex}\r\nContent-Length: {len(BODY)}\r\n\r\n").encode() + BODY

async def response(reader):
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    fields = {k.strip().lower(): v.strip() for k, _, v in (l.partition(":") for l in head[1:] if l)}
    if "chunked" in fields.get("transfer-encoding", ""):
        while (size := int((await reader.readline()).strip(), 16)):
            await reader.readexactly(size + 2)
        await reader.readline()
    else:
        await reader.readexactly(int(fields.get("content-length", 0)))
    return int(head[0].split()[1])

async def exchange(sem, delay_ms, opened):
    async with sem:
        r, w = await asyncio.open_connection("127.0.0.1", PORT)
        opened.append(w)
        w.write(request(delay_ms))
        await w.drain()
        if not delay_ms:
            return await asyncio.wait_for(response(r), 60)
    # Held: the answer is awaited outside the semaphore.
    return await asyncio.wait_for(response(r), DELAY + 120)

async def run(n, delay_ms, concurrency, opened):
    sem = asyncio.Semaphore(concurrency)
    return [asyncio.create_task(exchange(sem, delay_ms, opened)) for _ in range(n)]

async def close(opened):
    for w in opened:
        w.close()
    await asyncio.sleep(0.5)

async def main():
    warm = []
    statuses = await asyncio.gather(*await run(200, 0, 16, warm))
    assert all(s == 201 for s in statuses), f"warm-up answers: {sorted(set(statuses))}"
    await close(warm)
    await asyncio.sleep(3)
    before, before_anon, opened, samples = rss_kb(), rss_kb("RssAnon:"), [], []
    t0 = time.monotonic()
    if PHASE == "inflight":
        tasks = await run(COUNT, int(DELAY * 1000), 256, opened)
        while len(opened) < COUNT and time.monotonic() - t0 < DELAY:
            await asyncio.sleep(0.05)
        sent = time.monotonic() - t0
        # Sampled from 2 s after the last request left until 1 s before the first answer is due.
        await asyncio.sleep(2)
        while time.monotonic() < t0 + DELAY - 1 and not any(t.done() for t in tasks):
            samples.append((rss_kb(), fds(), threads()))
            await asyncio.sleep(0.25)
        statuses = await asyncio.gather(*tasks, return_exceptions=True)
    else:
        statuses = await asyncio.gather(*await run(COUNT, 0, 128, opened), return_exceptions=True)
        sent = time.monotonic() - t0
        for _ in range(8):
            await asyncio.sleep(0.25)
            samples.append((rss_kb(), fds(), threads()))
    load, load_fds, load_threads = max(samples) if samples else (rss_kb(), fds(), threads())
    await close(opened)
    await asyncio.sleep(AFTER)
    after, after_anon, after_threads = rss_kb(), rss_kb("RssAnon:"), threads()
    ok = sum(1 for s in statuses if s == 201)
    print("MEMJSON " + json.dumps({
        "phase": PHASE, "count": COUNT, "ok201": ok, "sent_s": round(sent, 2), "fds": load_fds,
        "threads": [load_threads, after_threads],
        "before_kb": before, "load_kb": load, "after_kb": after,
        "per_unit_kb": round((load - before) / COUNT, 2), "after_ratio": round(after / before, 3),
        "anon_kb": [before_anon, after_anon], "anon_ratio": round(after_anon / before_anon, 3),
        "errors": sorted({repr(s)[:80] for s in statuses if s != 201})[:3]}), flush=True)

asyncio.run(main())
PY

# phase RUN PHASE COUNT: one phase on a fresh gateway and database
phase() {
  local d="$OUT/$1-$2" gw
  mkdir -p "$d"
  port_free "$GW_PORT" || die "port $GW_PORT busy"
  write_gateway_conf "$d/gw.toml" "$GW_PORT" "$UP_PORT" "sqlite://$d/idemgate.db"
  (cd "$d" && RUST_LOG=warn exec "$BIN" serve --config gw.toml) >"$d/log" 2>&1 &
  gw=$!; remember_pid "$gw"
  wait_port "$GW_PORT" 60
  log "run $1: $2 phase, $3 $( [ "$2" = inflight ] && echo "requests held ${DELAY}s" || echo "idle connections")"
  python3 "$OUT/client.py" "$2" "$GW_PORT" "$gw" "$3" "$DELAY" "$AFTER" >"$d/client.out" &
  local client=$!; remember_pid "$client"
  wait "$client" || die "client failed ($2); gateway log: $(tail -5 "$d/log")"
  grep '^MEMJSON ' "$d/client.out" | tee -a "$OUT/results"
  stop_pid "$gw"
}

for ((run = 1; run <= RUNS; run++)); do
  phase "$run" inflight "$N"
  phase "$run" idle "$M"
done

python3 - "$OUT/results" "$AFTER" <<'PY'
import json, statistics, sys
rows = [json.loads(l[8:]) for l in open(sys.argv[1]) if l.startswith("MEMJSON ")]
med = lambda k, p: statistics.median(r[k] for r in rows if r["phase"] == p)
print(f"\nmedians of {len(rows) // 2} run(s); RSS of the gateway process; (anon): after/before of"
      " its anonymous memory alone (RssAnon: without the mapped binary and libraries)")
print(f"{'phase':<10}{'count':>7}{'201s':>7}{'before MiB':>11}{'load MiB':>10}{'KiB each':>9}"
      f"{'after ' + sys.argv[2] + 's MiB':>15}{'after/before':>14}{'(anon)':>8}")
for p, what in (("inflight", "request"), ("idle", "connection")):
    if not any(r["phase"] == p for r in rows):
        continue
    print(f"{p:<10}{med('count', p):>7.0f}{med('ok201', p):>7.0f}{med('before_kb', p) / 1024:>11.1f}"
          f"{med('load_kb', p) / 1024:>10.1f}{med('per_unit_kb', p):>9.1f}"
          f"{med('after_kb', p) / 1024:>15.1f}{med('after_ratio', p):>14.2f}{med('anon_ratio', p):>8.2f}")
PY
