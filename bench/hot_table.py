"""What PostgreSQL would spend per job if a claim and a completion were HOT updates: the bare claim
loop on today's `job` table against a sketch of a table no index of which names a column a claim or
a completion changes, in one database, alternating.

    .venv/bin/python bench/hot_table.py [--jobs 50000] [--rounds 2] [--fillfactor 30] [--events]
                                        [--realistic]

Today every state change of a job is a non-HOT update: `state` is in the predicate of every partial
index (waiting, due, running, finished, the unique key), so each claim and each completion writes a
new row version AND an entry in the primary key and in one partial index (four index entries per
job processed). The sketch ("hot") keeps the same job row, with no index but its primary key, and
moves what the claims and the rescuer look up into two narrow side tables: `jb_ready` (the waiting
jobs, by queue, priority, run_at, id: a row inserted at enqueue, deleted by the claim) and
`jb_lease` (the running jobs, by id: inserted by the claim, deleted by the completion; small, so the
rescuer and a global concurrency's count can read it whole). Claims and completions then update the
job row in place, HOT as long as its page has room (hence the fillfactor).

Both sides run the same loop as bench/jobs.py's floor: two connections, each claiming up to 100 jobs
and completing its previous 100 in the same statement, generic plans, until the queue is empty.
`today` is `job_claim_batch` itself; `--events` lets it publish its `completed` events (the worker's
default), which the sketch does not have. Printed per run: jobs/s, the backends' CPU per job (from
/proc) and this process's; at the end the share of HOT updates of each table and the medians.

`--realistic` brings the sketch closer: its job row is today's (`LIKE job`: the same columns,
domains and CHECK constraints, and the parent link's foreign key), its claim tests the queue's row
as today's does (paused, limits), and each completion also records the job in `jb_done` (queue,
finalized_at, id; indexed), what retention would read instead of today's index of finished jobs.

What the sketch still leaves out, so the figure is an upper bound of the saving and not a design:
the flow triggers, scheduled and retrying jobs (another side table, as `jb_ready`), the unique key (a
partial unique index on `state` blocks HOT; it would need its own table) and the admin's lookups by
state.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import asyncpg

import jobs as jobs_bench  # bench/jobs.py, beside this file
from machine_cpu import process_cpu_s  # bench/machine_cpu.py, beside this file
from paymanager.db.pool import init_connection
from paymanager.jobs._queries import Q

BATCH, PIPELINE = 100, 2

SKETCH_JOB = """
CREATE TABLE jb (id bigserial PRIMARY KEY, queue text NOT NULL, kind text NOT NULL, payload jsonb NOT NULL,
  priority int NOT NULL DEFAULT 0, run_at timestamptz NOT NULL DEFAULT now(), state text NOT NULL,
  attempt int NOT NULL DEFAULT 0, max_attempts int, backoff jsonb, timeout_ms int, parent_id bigint,
  cancel_requested boolean NOT NULL DEFAULT false, lease_owner text, lease_token uuid,
  lease_expires_at timestamptz, attempted_at timestamptz, finalized_at timestamptz, result jsonb)
  WITH (fillfactor = {fillfactor});
"""
# `--realistic`: the job row as today's, with its CHECK constraints and column domains.
REALISTIC_JOB = """
CREATE TABLE jb (LIKE job INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING IDENTITY)
  WITH (fillfactor = {fillfactor});
ALTER TABLE jb ADD PRIMARY KEY (id);
ALTER TABLE jb ADD FOREIGN KEY (parent_id) REFERENCES jb (id) ON DELETE SET NULL;
"""
HOT_SCHEMA = """
{jb}
CREATE TABLE jb_ready (queue text NOT NULL, priority int NOT NULL, run_at timestamptz NOT NULL,
  id bigint NOT NULL);
CREATE INDEX jb_ready_idx ON jb_ready (queue, priority, run_at, id);
CREATE TABLE jb_lease (id bigint PRIMARY KEY, queue text NOT NULL, expires_at timestamptz NOT NULL);
-- What retention would read (`--realistic` writes it): finished jobs by queue and time.
CREATE TABLE jb_done (queue text NOT NULL, finalized_at timestamptz NOT NULL, id bigint NOT NULL);
CREATE INDEX jb_done_idx ON jb_done (queue, finalized_at);
"""

# job_claim_batch's shape on the sketch: complete (fenced by token) and unlease the previous batch,
# take the next one off jb_ready, lease it, one statement.
HOT_CLAIM = """
WITH done AS (
    UPDATE jb SET state = 'completed', finalized_at = now(), result = NULL,
           lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
      FROM unnest($3::bigint[], $4::uuid[]) AS r(id, token)
     WHERE jb.id = ANY ($3::bigint[]) AND jb.id = r.id AND jb.lease_token = r.token
    RETURNING jb.id, jb.queue, jb.finalized_at
), recorded AS (
    INSERT INTO jb_done SELECT d.queue, d.finalized_at, d.id FROM done AS d WHERE $5::boolean
), unleased AS (
    DELETE FROM jb_lease WHERE id = ANY (ARRAY(SELECT d.id FROM done AS d))
), picked AS (
    DELETE FROM jb_ready WHERE ctid = ANY (ARRAY(
        SELECT ctid FROM jb_ready
         WHERE queue = $1
           -- today's claim's test of the queue's row (`--realistic`)
           AND NOT ($5::boolean AND EXISTS (
                SELECT 1 FROM job_queue AS q WHERE q.name = $1 AND (q.paused OR q.rate_max IS NOT NULL
                       OR q.concurrency_max IS NOT NULL OR q.rate_paused_until > now())))
         ORDER BY priority, run_at, id LIMIT $2
           FOR UPDATE SKIP LOCKED))
    RETURNING id
), claimed AS (
    UPDATE jb SET state = 'running', attempt = jb.attempt + 1, attempted_at = now(), lease_owner = 'hot',
           lease_token = gen_random_uuid(), lease_expires_at = now() + 30000 * interval '1 millisecond'
     WHERE jb.id = ANY (ARRAY(SELECT p.id FROM picked AS p))
    RETURNING jb.id, jb.queue, jb.kind, jb.payload, jb.priority, jb.attempt, jb.max_attempts, jb.backoff,
              jb.timeout_ms, jb.lease_token, jb.parent_id, jb.cancel_requested, jb.lease_expires_at,
              date_part('epoch', now() - jb.run_at) AS waited_s
), leased AS (
    INSERT INTO jb_lease SELECT c.id, c.queue, c.lease_expires_at FROM claimed AS c
)
SELECT true AS claimed, c.id, c.lease_token FROM claimed AS c
UNION ALL
SELECT false, d.id, NULL FROM done AS d
"""


def backend_cpu_s(pids: list[int]) -> float:
    return sum(process_cpu_s(pid) for pid in pids)


async def fill(conn: asyncpg.Connection, side: str, jobs: int) -> None:
    """`jobs` available no-op jobs in the side's tables, and nothing else."""
    table, others = ("job", "") if side == "today" else ("jb", ", jb_ready, jb_lease, jb_done")
    await conn.execute(f"TRUNCATE {table}{others}")
    await conn.execute(
        f"INSERT INTO {table} (queue, kind, payload, state)"
        " SELECT 'bench', 'noop', '{}', 'available' FROM generate_series(1, $1)",
        jobs,
    )
    if side == "hot":
        await conn.execute("INSERT INTO jb_ready SELECT queue, priority, run_at, id FROM jb")
    await conn.execute(f"VACUUM ANALYZE {table}{others}")
    await conn.execute("CHECKPOINT")


async def claim_loop(conn: asyncpg.Connection, side: str, events: bool, realistic: bool) -> None:
    ids: list[int] = []
    tokens: list[Any] = []
    while True:
        if side == "today":
            rows = await conn.fetch(
                Q["job_claim_batch"], ["bench"], [BATCH], "today", 30_000, ids, tokens, None, events, not ids
            )
        else:
            rows = await conn.fetch(HOT_CLAIM, "bench", BATCH, ids, tokens, realistic)
        claimed = [r for r in rows if r["claimed"]]
        if not claimed and not ids:
            return
        ids = [r["id"] for r in claimed]
        tokens = [r["lease_token"] for r in claimed]


async def drain(dsn: str, side: str, jobs: int, events: bool, realistic: bool) -> tuple[float, float, float]:
    """(jobs/s, backends' CPU us per job, this process's CPU us per job)."""
    conns = [await asyncpg.connect(dsn) for _ in range(PIPELINE)]
    for conn in conns:
        await init_connection(conn)
        await conn.execute(Q["job_session_generic_plans"])
    pids = [conn.get_server_pid() for conn in conns]
    backends, own, started = backend_cpu_s(pids), time.process_time(), time.perf_counter()
    await asyncio.gather(*(claim_loop(conn, side, events, realistic) for conn in conns))
    seconds = time.perf_counter() - started
    backends, own = backend_cpu_s(pids) - backends, time.process_time() - own
    for conn in conns:
        await conn.close()
    return jobs / seconds, backends / jobs * 1e6, own / jobs * 1e6


async def run(jobs: int, rounds: int, fillfactor: int, events: bool, realistic: bool) -> None:
    dsn = await jobs_bench.create_database("ours")  # migrated
    try:
        conn = await asyncpg.connect(dsn)
        await init_connection(conn)
        job = (REALISTIC_JOB if realistic else SKETCH_JOB).format(fillfactor=fillfactor)
        await conn.execute(HOT_SCHEMA.format(jb=job))
        print(
            f"# {jobs} jobs, {rounds} rounds, hot fillfactor {fillfactor}, today's events",
            "on" if events else "off",
            "; the sketch's job row and queue test as today's, completions recorded for retention"
            if realistic
            else "",
        )
        figures: dict[str, list[tuple[float, float, float]]] = {"today": [], "hot": []}
        for r in range(rounds):
            for side in ("today", "hot") if r % 2 == 0 else ("hot", "today"):
                await fill(conn, side, jobs)
                figures[side].append(await drain(dsn, side, jobs, events, realistic))
                rate, backends, own = figures[side][-1]
                print(
                    f"  {side:<5} {rate:8.0f} jobs/s  backends {backends:5.1f} us/job",
                    f" client {own:4.1f} us/job",
                )
        for table in ("job", "jb"):
            row = await conn.fetchrow(
                "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = $1", table
            )
            print(f"{table}: {row['n_tup_hot_upd']} of {row['n_tup_upd']} updates HOT")
        today, hot = figures["today"], figures["hot"]
        rate_today, rate_hot = statistics.median(f[0] for f in today), statistics.median(f[0] for f in hot)
        cpu_today, cpu_hot = statistics.median(f[1] for f in today), statistics.median(f[1] for f in hot)
        print(
            f"medians: today {rate_today:.0f} jobs/s, {cpu_today:.1f} us/job; hot {rate_hot:.0f} jobs/s,"
            f" {cpu_hot:.1f} us/job; hot/today throughput {rate_hot / rate_today:.2f}x,"
            f" backend CPU {cpu_hot / cpu_today:.2f}x"
        )
        await conn.close()
    finally:
        await jobs_bench.drop_database(dsn)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--fillfactor", type=int, default=30)
    parser.add_argument("--events", action="store_true", help="today's claims publish `completed` events")
    parser.add_argument(
        "--realistic",
        action="store_true",
        help="the job row with today's constraints; completions recorded for retention",
    )
    args = parser.parse_args()
    asyncio.run(run(args.jobs, args.rounds, args.fillfactor, args.events, args.realistic))


if __name__ == "__main__":
    main()
