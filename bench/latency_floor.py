"""The floor under any PostgreSQL job queue's enqueue-to-start latency on this machine.

    .venv/bin/python bench/latency_floor.py [--jobs 200] [--rounds 3]

No engine: a producer process INSERTs a row and NOTIFYs in one autocommit statement (a durable
commit), 20 ms apart as in `bench/jobs.py --only latency`; a listener process, idle in between, takes
each notification and claims the row with one `UPDATE ... FOR UPDATE SKIP LOCKED` on a second
connection. Printed per round, p50 / p99 in ms, all from the producer's call start:
- the producer's call (its INSERT and durable commit);
- the notification's arrival in the listener;
- the claim's return: the latency of a queue with nothing of its own, the figure to read beside
  paymanager's (`bench/jobs.py`), measured minutes apart on a machine whose commit time moves.
Both processes run on uvloop, as the engine's benchmark does.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time

import asyncpg
import uvloop

SERVER = os.environ.get("TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
GAP_S = 0.020
TABLE = f"pm_latency_floor_{os.getpid()}"
CREATE = "CREATE TABLE {t} (id bigserial PRIMARY KEY, state text NOT NULL DEFAULT 'available')"
ENQUEUE = "WITH j AS (INSERT INTO {t} DEFAULT VALUES RETURNING id) SELECT pg_notify('{t}', $1) FROM j"
CLAIM = """UPDATE {t} SET state = 'running'
 WHERE id = (SELECT id FROM {t} WHERE state = 'available' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id"""


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[max(int(len(ordered) * pct / 100) - 1, 0)]


async def listen(table: str, jobs: int) -> None:
    """The listener process: print 'ready', then for each notification claim one row; print the
    arrival and claim times (epoch seconds) against the payload's call start, one line per job."""
    listener = await asyncpg.connect(SERVER)
    claimer = await asyncpg.connect(SERVER)
    arrived: asyncio.Queue[tuple[float, str]] = asyncio.Queue()
    await listener.add_listener(table, lambda *args: arrived.put_nowait((time.time(), args[3])))
    print("ready", flush=True)
    lines = []
    for _ in range(jobs):
        at, started = await arrived.get()
        claimed = await claimer.fetchval(CLAIM.format(t=table))
        assert claimed is not None, "a notification without a row to claim"
        lines.append(f"{started} {at} {time.time()}")
    print("\n".join(lines), flush=True)
    await listener.close()
    await claimer.close()


async def produce(table: str, jobs: int) -> list[float]:
    conn = await asyncpg.connect(SERVER)
    calls = []
    for _ in range(jobs):
        started = time.time()
        await conn.execute(ENQUEUE.format(t=table), repr(started))
        calls.append((time.time() - started) * 1000)
        await asyncio.sleep(GAP_S)
    await conn.close()
    return calls


def one_round(table: str, jobs: int) -> tuple[list[float], list[float], list[float]]:
    child = subprocess.Popen(
        [sys.executable, __file__, "--listen", table, "--jobs", str(jobs)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    time.sleep(0.5)  # let the listener go idle, as the engine's benchmark lets its worker
    calls = uvloop.run(produce(table, jobs))
    out, _ = child.communicate(timeout=60)
    arrivals, claims = [], []
    for line in out.split("\n"):
        if line.strip():
            started, at, claimed = (float(x) for x in line.split())
            arrivals.append((at - started) * 1000)
            claims.append((claimed - started) * 1000)
    return calls, arrivals, claims


async def run_sql(sql: str) -> None:
    conn = await asyncpg.connect(SERVER)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--listen", metavar="TABLE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.listen:
        uvloop.run(listen(args.listen, args.jobs))
        return
    gap_ms = GAP_S * 1000
    print(f"# latency floor: {args.jobs} jobs {gap_ms:.0f} ms apart, {args.rounds} rounds; p50 / p99 ms")
    uvloop.run(run_sql(CREATE.format(t=TABLE)))
    try:
        for r in range(args.rounds):
            calls, arrivals, claims = one_round(TABLE, args.jobs)
            print(
                f"round {r + 1}: producer's call {statistics.median(calls):.2f} / {percentile(calls, 99):.2f}"
                f"   notification {statistics.median(arrivals):.2f} / {percentile(arrivals, 99):.2f}"
                f"   claimed {statistics.median(claims):.2f} / {percentile(claims, 99):.2f}"
            )
    finally:
        uvloop.run(run_sql(f"DROP TABLE {TABLE}"))


if __name__ == "__main__":
    main()
