"""The one-job enqueue statement (`job_insert`) before and after migration 0112, A/B.

    .venv/bin/python bench/insert_statement.py [--inserts 3000] [--rounds 5]

Migration 0112 made `job_insert` read the queue's `waiting_events` flag (the `waiting` event, opted
into per queue) from the queue's row it already read for the depth limit, now once in a CTE both
uses share. This times the statement as it was (BEFORE, below: as of migration 0111) and as it is,
in one database on the new schema and one session, the two taking turns call by call (so the
machine's load drifts alike for both), each inserting a plain job as `enqueue` does into a queue
without the setting. The figure is the median call, per round, and the median of the rounds; the
ratio after/before is the cost to a producer whose queue nobody listens to for `waiting`.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

import asyncpg

from paymanager.db import migrations
from paymanager.db.pool import init_connection
from paymanager.jobs._queries import Q

SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"

BEFORE = """
WITH target AS (
    SELECT CASE WHEN $15::boolean THEN timestamptz 'epoch' - (now() - timestamptz 'epoch')
                ELSE coalesce($5::timestamptz, now())
                     + make_interval(secs => coalesce($6::bigint, 0) / 1000.0)
           END AS run_at
), full_queue AS (
    SELECT 1 FROM job_queue q
     WHERE q.name = $1 AND q.max_depth IS NOT NULL
       AND (SELECT count(*) FROM (
                SELECT 1 FROM job j
                 WHERE j.queue = $1
                   AND j.state IN ('available', 'scheduled', 'retryable', 'running', 'waiting_children')
                 LIMIT q.max_depth) AS d) >= q.max_depth
)
INSERT INTO job (queue, kind, payload, priority, run_at, max_attempts, backoff, unique_key, timeout_ms,
                 parent_id, state, pending_children, on_child_dead, parent_policy)
SELECT $1, $2, $3, $4, target.run_at, $7, $8, $9, $10, $11,
       coalesce($12::job_state,
                CASE WHEN target.run_at > now() THEN 'scheduled'::job_state ELSE 'available'::job_state END),
       $13, $14, $16
  FROM target
 WHERE NOT EXISTS (SELECT 1 FROM full_queue)
ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND state NOT IN ('completed', 'dead', 'cancelled')
DO NOTHING
RETURNING id, CASE WHEN state = 'available' THEN pg_notify('pm_job_available', queue) END AS notified
"""

ARGS = ("bench", "noop", {"n": 1}, 0, None, None, None, None, None, None, None, None, 0, "fail", False, None)


async def inserts(conn: asyncpg.Connection, n: int, first_is_new: bool) -> tuple[list[float], list[float]]:
    """n inserts, the two statements taking turns; each call's time (us), (before, after)."""
    await conn.execute("TRUNCATE job")
    times: tuple[list[float], list[float]] = ([], [])
    for i in range(n):
        new = (i % 2 == 0) == first_is_new
        started = time.perf_counter()
        if new:
            await conn.fetch(Q["job_insert"], *ARGS)
        else:
            await conn.fetch(BEFORE, *ARGS)
        times[1 if new else 0].append((time.perf_counter() - started) * 1e6)
    return times


async def run(n: int, rounds: int) -> None:
    name = f"pmbench_insert_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(SERVER)
    await admin.execute(f'CREATE DATABASE "{name}"')
    dsn = SERVER.rsplit("/", 1)[0] + "/" + name
    try:
        conn = await asyncpg.connect(dsn)
        await init_connection(conn)
        await migrations.migrate(conn)
        medians: tuple[list[float], list[float]] = ([], [])
        for r in range(rounds):
            before, after = await inserts(conn, n, first_is_new=r % 2 == 1)
            medians[0].append(statistics.median(before))
            medians[1].append(statistics.median(after))
        b, a = statistics.median(medians[0]), statistics.median(medians[1])
        print(
            f"job_insert, 1 plain job    before {b:7.1f} us  after {a:7.1f} us  after/before {a / b:.3f}"
            f"  (per-round medians before {', '.join(f'{v:.0f}' for v in medians[0])};"
            f" after {', '.join(f'{v:.0f}' for v in medians[1])})",
            flush=True,
        )
        await conn.close()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--inserts", type=int, default=3_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(run(args.inserts, args.rounds))


if __name__ == "__main__":
    main()
