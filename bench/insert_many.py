"""Bulk enqueue (`enqueue_many`) as it is against its form before the payloads travelled as one
JSON array, A/B in one database and one session.

    .venv/bin/python bench/insert_many.py [--jobs 100000] [--rounds 6]

BEFORE sends every column of `job_insert_many` as an array, the payloads as `jsonb[]` (the jsonb
codec called per payload, and asyncpg's array encoder testing each element against the
collection ABCs); it is the statement and the calls as they were before. `enqueue_many` sends the
payloads as one JSON text and a column no job sets as NULL. Both write the same `--jobs` plain jobs
(chunks of 5,000, each chunk validated as `enqueue_many` does), from an empty table, the two taking
turns round by round. Printed per round and as medians: wall time, this process's CPU time and
the backend's, per 100,000 jobs.
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
from paymanager.jobs import NewJob, enqueue_many
from paymanager.jobs.enqueue import DEFAULT_MAX_PAYLOAD_BYTES, INSERT_MANY_CHUNK, payload_json, validate_job

BEFORE = """
WITH inserted AS (
    INSERT INTO job (queue, kind, payload, priority, run_at, max_attempts, backoff, timeout_ms, state)
    SELECT r.queue, r.kind, r.payload, r.priority, coalesce(r.run_at, now()), r.max_attempts, r.backoff,
           r.timeout_ms,
           CASE WHEN r.run_at > now() THEN 'scheduled'::job_state ELSE 'available'::job_state END
      FROM unnest($1::text[], $2::text[], $3::jsonb[], $4::integer[], $5::timestamptz[], $6::integer[],
                  $7::jsonb[], $8::integer[])
           AS r(queue, kind, payload, priority, run_at, max_attempts, backoff, timeout_ms)
    RETURNING id, queue, kind, state
), woken AS (
    SELECT pg_notify('pm_job_available', q.queue)
      FROM (SELECT DISTINCT i.queue FROM inserted AS i WHERE i.state = 'available') AS q
), waiting AS (
    SELECT pg_notify('pm_job_events', json_agg(json_build_object(
               'e', 'waiting', 'id', n.id, 'k', n.kind, 'q', n.queue))::text)
      FROM (SELECT i.id, i.kind, i.queue, (row_number() OVER () - 1) / 25 AS chunk
              FROM inserted AS i
             WHERE EXISTS (SELECT 1 FROM job_queue AS q WHERE q.waiting_events)
               AND i.state = 'available'
               AND i.queue IN (SELECT q.name FROM job_queue AS q WHERE q.waiting_events)) AS n
     GROUP BY n.chunk
)
SELECT i.id FROM inserted AS i WHERE (SELECT count(*) FROM woken) >= 0 AND (SELECT count(*) FROM waiting) >= 0
"""


async def enqueue_many_before(conn: asyncpg.Connection, jobs: list[NewJob]) -> list[int]:
    ids: list[int] = []
    for start in range(0, len(jobs), INSERT_MANY_CHUNK):
        chunk = jobs[start : start + INSERT_MANY_CHUNK]
        payloads = [payload_json(j.payload) for j in chunk]
        for job, payload in zip(chunk, payloads, strict=True):
            validate_job(
                job.kind,
                job.queue,
                payload,
                job.priority,
                job.max_attempts,
                job.timeout_ms,
                DEFAULT_MAX_PAYLOAD_BYTES,
            )
        rows = await conn.fetch(
            BEFORE,
            [j.queue for j in chunk],
            [j.kind for j in chunk],
            payloads,
            [j.priority for j in chunk],
            [j.run_at for j in chunk],
            [j.max_attempts for j in chunk],
            [None if j.backoff is None else j.backoff.to_json() for j in chunk],
            [j.timeout_ms for j in chunk],
        )
        ids.extend(int(row["id"]) for row in rows)
    return ids


async def one_run(conn: asyncpg.Connection, form: str, n: int) -> tuple[float, float, float]:
    """(wall s, client CPU s, backend CPU s) per 100,000 jobs."""
    await conn.execute("TRUNCATE job")
    jobs = [NewJob("noop", {"i": i}, queue="bench") for i in range(n)]
    pid = conn.get_server_pid()
    backend, own, started = process_cpu_s(pid), time.process_time(), time.perf_counter()
    async with conn.transaction():
        ids = await (enqueue_many_before(conn, jobs) if form == "before" else enqueue_many(conn, jobs))
    scale = 100_000 / n
    seconds = time.perf_counter() - started
    assert len(ids) == n
    return seconds * scale, (time.process_time() - own) * scale, (process_cpu_s(pid) - backend) * scale


async def run(n: int, rounds: int) -> None:
    dsn = await jobs_bench.create_database("ours")  # migrated
    try:
        conn = await asyncpg.connect(dsn)
        await init_connection(conn)
        print(f"# {n} jobs per run, {rounds} rounds; seconds per 100,000 jobs: wall, this process, backend")
        figures: dict[str, list[tuple[float, float, float]]] = {"before": [], "after": []}
        for r in range(rounds):
            for form in ("before", "after") if r % 2 == 0 else ("after", "before"):
                figures[form].append(await one_run(conn, form, n))
                wall, own, backend = figures[form][-1]
                print(f"  {form:<6} wall {wall:5.2f}  client {own:5.2f}  backend {backend:5.2f}")
        medians: dict[str, Any] = {
            form: [statistics.median(f[i] for f in runs) for i in range(3)] for form, runs in figures.items()
        }
        b, a = medians["before"], medians["after"]
        print(
            f"medians: before wall {b[0]:.2f} client {b[1]:.2f} backend {b[2]:.2f}; after wall {a[0]:.2f}"
            f" client {a[1]:.2f} backend {a[2]:.2f}; after/before wall {a[0] / b[0]:.2f},"
            f" client {a[1] / b[1]:.2f}, backend {a[2] / b[2]:.2f}"
        )
        await conn.close()
    finally:
        await jobs_bench.drop_database(dsn)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    asyncio.run(run(args.jobs, args.rounds))


if __name__ == "__main__":
    main()
