"""What PostgreSQL would spend per job if a claim and a completion were HOT updates: the bare claim
loop on today's `job` table against a sketch of a table no index of which names a column a claim or
a completion changes, in one database, alternating.

    .venv/bin/python bench/hot_table.py [--jobs 50000] [--rounds 2] [--fillfactor 30] [--events]
                                        [--realistic] [--triggered [--lock-job]] [--pipeline 2]

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

`--triggered` keeps the side tables by one statement trigger on the sketch's job table (from its
transition tables), so that any statement that moves a job keeps them right, as a design that does
not rewrite every writer would; the claim then only updates job rows, taking them off jb_ready by
locking their jb_ready rows, or (`--lock-job`) by locking the job rows as today's claim does.
`--pipeline` sets how many connections claim at once (the worker keeps two claims in flight).

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
from dataclasses import dataclass
from typing import Any

import asyncpg

import jobs as jobs_bench  # bench/jobs.py, beside this file
from machine_cpu import process_cpu_s  # bench/machine_cpu.py, beside this file
from paymanager.db.pool import init_connection
from paymanager.jobs._queries import Q

BATCH = 100

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

# `--triggered`: the side tables kept by one statement trigger on the job table, whatever statement
# moves a job, so the claim and the completion only update the job row (and the claim reads jb_ready).
TRIGGER = """
CREATE FUNCTION jb_moved() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
    WITH moved AS (
        SELECT o.id, o.state AS was, n.state AS now_, n.queue, n.priority, n.run_at,
               o.queue AS old_queue, o.priority AS old_priority, o.run_at AS old_run_at,
               n.lease_expires_at, n.finalized_at
          FROM old_rows AS o JOIN new_rows AS n ON n.id = o.id
         WHERE o.state IS DISTINCT FROM n.state
            OR (n.state = 'available'
                AND (o.queue, o.priority, o.run_at) IS DISTINCT FROM (n.queue, n.priority, n.run_at))
            OR (n.state = 'running' AND o.lease_expires_at IS DISTINCT FROM n.lease_expires_at)
    ), ready_out AS (
        DELETE FROM jb_ready AS r USING moved AS m
         WHERE m.was = 'available' AND r.queue = m.old_queue AND r.priority = m.old_priority
           AND r.run_at = m.old_run_at AND r.id = m.id
    ), ready_in AS (
        INSERT INTO jb_ready SELECT m.queue, m.priority, m.run_at, m.id FROM moved AS m
         WHERE m.now_ = 'available'
    ), lease_out AS (
        DELETE FROM jb_lease WHERE id = ANY (ARRAY(SELECT m.id FROM moved AS m WHERE m.was = 'running'))
    ), lease_in AS (
        INSERT INTO jb_lease SELECT m.id, m.queue, m.lease_expires_at FROM moved AS m WHERE m.now_ = 'running'
    )
    INSERT INTO jb_done SELECT m.queue, m.finalized_at, m.id FROM moved AS m
     WHERE m.now_ IN ('completed', 'dead', 'cancelled') AND m.was NOT IN ('completed', 'dead', 'cancelled');
    RETURN NULL;
END
$f$;
CREATE TRIGGER jb_moved AFTER UPDATE ON jb REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION jb_moved();
"""
# The claim with the trigger: it updates the job rows alone; `{pick}` chooses what it locks.
TRIGGERED_CLAIM = """
WITH done AS (
    UPDATE jb SET state = 'completed', finalized_at = now(), result = NULL,
           lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
      FROM unnest($3::bigint[], $4::uuid[]) AS r(id, token)
     WHERE jb.id = ANY ($3::bigint[]) AND jb.id = r.id AND jb.lease_token = r.token
    RETURNING jb.id
), claimed AS (
    UPDATE jb SET state = 'running', attempt = jb.attempt + 1, attempted_at = now(), lease_owner = 'hot',
           lease_token = gen_random_uuid(), lease_expires_at = now() + 30000 * interval '1 millisecond'
     WHERE jb.id = ANY (ARRAY({pick}))
       AND jb.state = 'available'
    RETURNING jb.id, jb.queue, jb.kind, jb.payload, jb.priority, jb.attempt, jb.max_attempts, jb.backoff,
              jb.timeout_ms, jb.lease_token, jb.parent_id, jb.cancel_requested,
              date_part('epoch', now() - jb.run_at) AS waited_s
)
SELECT true AS claimed, c.id, c.lease_token FROM claimed AS c
UNION ALL
SELECT false, d.id, NULL FROM done AS d
"""

# What the claim locks to take a job: its jb_ready row (the narrow one), or (`--lock-job`) the job row
# itself, reached through jb_ready, as today's claim locks it.
PICKS = {
    "ready": """
        SELECT r.id FROM jb_ready AS r
         WHERE r.queue = $1
           AND NOT EXISTS (
                SELECT 1 FROM job_queue AS q WHERE q.name = $1 AND (q.paused OR q.rate_max IS NOT NULL
                       OR q.concurrency_max IS NOT NULL OR q.rate_paused_until > now()))
         ORDER BY r.priority, r.run_at, r.id LIMIT $2
           FOR UPDATE SKIP LOCKED""",
    "job": """
        SELECT j.id FROM jb_ready AS r JOIN jb AS j ON j.id = r.id
         WHERE r.queue = $1 AND j.state = 'available'
           AND NOT EXISTS (
                SELECT 1 FROM job_queue AS q WHERE q.name = $1 AND (q.paused OR q.rate_max IS NOT NULL
                       OR q.concurrency_max IS NOT NULL OR q.rate_paused_until > now()))
         ORDER BY r.priority, r.run_at, r.id LIMIT $2
           FOR UPDATE OF j SKIP LOCKED""",
}


@dataclass(frozen=True)
class Options:
    events: bool
    realistic: bool
    triggered: bool
    lock_job: bool
    pipeline: int


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


async def claim_loop(conn: asyncpg.Connection, side: str, opts: Options) -> None:
    ids: list[int] = []
    tokens: list[Any] = []
    triggered = TRIGGERED_CLAIM.format(pick=PICKS["job" if opts.lock_job else "ready"])
    while True:
        if side == "today":
            claim = Q["job_claim_batch"]
            rows = await conn.fetch(
                claim, ["bench"], [BATCH], "today", 30_000, ids, tokens, None, opts.events, not ids
            )
        elif opts.triggered:
            rows = await conn.fetch(triggered, "bench", BATCH, ids, tokens)
        else:
            rows = await conn.fetch(HOT_CLAIM, "bench", BATCH, ids, tokens, opts.realistic)
        claimed = [r for r in rows if r["claimed"]]
        if not claimed and not ids:
            return
        ids = [r["id"] for r in claimed]
        tokens = [r["lease_token"] for r in claimed]


async def drain(dsn: str, side: str, jobs: int, opts: Options) -> tuple[float, float, float]:
    """(jobs/s, backends' CPU us per job, this process's CPU us per job)."""
    conns = [await asyncpg.connect(dsn) for _ in range(opts.pipeline)]
    for conn in conns:
        await init_connection(conn)
        await conn.execute(Q["job_session_generic_plans"])
    pids = [conn.get_server_pid() for conn in conns]
    backends, own, started = backend_cpu_s(pids), time.process_time(), time.perf_counter()
    await asyncio.gather(*(claim_loop(conn, side, opts) for conn in conns))
    seconds = time.perf_counter() - started
    backends, own = backend_cpu_s(pids) - backends, time.process_time() - own
    for conn in conns:
        await conn.close()
    return jobs / seconds, backends / jobs * 1e6, own / jobs * 1e6


async def run(jobs: int, rounds: int, fillfactor: int, opts: Options) -> None:
    dsn = await jobs_bench.create_database("ours")  # migrated
    try:
        conn = await asyncpg.connect(dsn)
        await init_connection(conn)
        job = (REALISTIC_JOB if opts.realistic else SKETCH_JOB).format(fillfactor=fillfactor)
        await conn.execute(HOT_SCHEMA.format(jb=job))
        if opts.triggered:
            await conn.execute(TRIGGER)
        print(
            f"# {jobs} jobs, {rounds} rounds, hot fillfactor {fillfactor}, {opts.pipeline} connections,"
            " today's events",
            "on" if opts.events else "off",
            "; the sketch's job row and queue test as today's, completions recorded for retention"
            if opts.realistic
            else "",
            "; side tables kept by a statement trigger" if opts.triggered else "",
            "; the claim locks the job row" if opts.lock_job else "",
        )
        figures: dict[str, list[tuple[float, float, float]]] = {"today": [], "hot": []}
        for r in range(rounds):
            for side in ("today", "hot") if r % 2 == 0 else ("hot", "today"):
                await fill(conn, side, jobs)
                figures[side].append(await drain(dsn, side, jobs, opts))
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
    parser.add_argument(
        "--triggered", action="store_true", help="side tables kept by a statement trigger (and --realistic)"
    )
    parser.add_argument(
        "--lock-job", action="store_true", help="with --triggered: the claim locks the job row, not jb_ready"
    )
    parser.add_argument("--pipeline", type=int, default=2, help="connections claiming at once")
    args = parser.parse_args()
    if args.lock_job and not args.triggered:
        parser.error("--lock-job goes with --triggered")
    realistic = args.realistic or args.triggered
    opts = Options(args.events, realistic, args.triggered, args.lock_job, args.pipeline)
    asyncio.run(run(args.jobs, args.rounds, args.fillfactor, opts))


if __name__ == "__main__":
    main()
