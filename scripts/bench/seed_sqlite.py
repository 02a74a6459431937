"""Seeds an idemgate SQLite file with N completed records (for scripts/bench/scale.sh).

usage: seed_sqlite.py DB N. The gateway must be stopped. Keys are 32 hex digits spread evenly
over the key space and written in key order, with the rollback journal and no syncs, so ten
million take about a minute and a half; the file is back in WAL mode at the end. Every record
copies the principal and route of the record already in the file; the benchmark never reads
them back (its keys are random), so they carry no headers and no checksum.
"""
import os
import sqlite3
import sys
import time

db, n = sys.argv[1], int(sys.argv[2])
conn = sqlite3.connect(db)
principal, route = conn.execute(
    "SELECT principal, route FROM idempotency_records LIMIT 1").fetchone()
conn.execute("PRAGMA journal_mode=DELETE")
conn.execute("PRAGMA synchronous=OFF")
conn.execute("PRAGMA cache_size=-1000000")
now = int(time.time() * 1000)
step = 2**128 // max(n, 1)
body = b'{"id":"pay_1","amount":100,"currency":"EUR","status":"created"}'
fingerprint = os.urandom(32)


def rows():
    for x in range(n):
        yield (principal, route, "%032x" % (x * step), fingerprint, body, now - 1000, now - 900,
               now + 86_400_000 + x % 3_600_000)


conn.execute("BEGIN")
conn.executemany(
    """INSERT INTO idempotency_records (principal, route, key, fingerprint, fingerprint_version,
       state, fence, status, response_body, replayable, created_at, completed_at, expires_at)
       VALUES (?, ?, ?, ?, 1, 'completed', 1, 201, ?, 1, ?, ?, ?)""", rows())
conn.commit()
conn.execute("PRAGMA journal_mode=WAL")
conn.close()
