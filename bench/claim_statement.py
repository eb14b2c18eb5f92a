"""The plain claim statements alone, before and after the queue limits (migration 0110), A/B.

    .venv/bin/python bench/claim_statement.py [--claims 3000] [--rounds 5]

The queue limits added to the plain claims' read of the queue's row (`job_queue`) the test that
the queue has no limit. This times that statement with and without the test, in one database and
one session planned as the worker plans it (generic plans, index scans), alternating, so what it
costs a queue without limits shows apart from the noise of whole-engine runs: `job_claim_queue`
(an idle worker's one-job claim, on the enqueue-to-start path) and `job_claim_batch` (a busy
worker's claim of 100 jobs with 100 completions). Each case runs with no row for the queue in
`job_queue`, and with one (a queue with a max depth), and beside two limited queues.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from typing import Any

import asyncpg

from paymanager.db import migrations
from paymanager.db.pool import init_connection
from paymanager.jobs._queries import Q

SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"
NEW_GUARD = (
    "(q.paused OR q.rate_max IS NOT NULL\n"
    "                           OR q.concurrency_max IS NOT NULL OR q.rate_paused_until > now()))"
)
NEW_GUARD_BATCH = (
    "(q.paused OR q.rate_max IS NOT NULL\n"
    "                       OR q.concurrency_max IS NOT NULL OR q.rate_paused_until > now()))"
)


def before(statement: str) -> str:
    """The statement as it was before the limits: the queue's row tested for `paused` alone."""
    old = statement.replace(NEW_GUARD, "q.paused)").replace(NEW_GUARD_BATCH, "q.paused)")
    assert old != statement, "the limits' guard was not found in the statement"
    return old


async def one_job_claims(conn: asyncpg.Connection, statement: str, n: int) -> float:
    await conn.execute("TRUNCATE job")
    await conn.execute(
        "INSERT INTO job (queue, kind, payload, state) SELECT 'bench', 'noop', '{}', 'available'"
        " FROM generate_series(1, $1)",
        n,
    )
    started = time.perf_counter()
    for _ in range(n):
        await conn.fetch(statement, "bench", 1, "bench", 30_000, True)
    return (time.perf_counter() - started) / n * 1e6


async def batch_claims(conn: asyncpg.Connection, statement: str, n: int) -> float:
    await conn.execute("TRUNCATE job")
    await conn.execute(
        "INSERT INTO job (queue, kind, payload, state) SELECT 'bench', 'noop', '{}', 'available'"
        " FROM generate_series(1, $1)",
        n,
    )
    held: list[tuple[int, uuid.UUID]] = []
    calls = 0
    started = time.perf_counter()
    while True:
        rows = await conn.fetch(
            statement, ["bench"], [100], "bench", 30_000,
            [h[0] for h in held], [h[1] for h in held], [None] * len(held), False, False,
        )  # fmt: skip
        calls += 1
        held = [(r["id"], r["lease_token"]) for r in rows if r["claimed"]]
        if not held:
            break
    return (time.perf_counter() - started) / calls * 1e6


async def run(claims: int, rounds: int) -> None:
    name = f"pmbench_claim_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(SERVER)
    await admin.execute(f'CREATE DATABASE "{name}"')
    dsn = SERVER.rsplit("/", 1)[0] + "/" + name
    try:
        conn = await asyncpg.connect(dsn)
        await init_connection(conn)
        await migrations.migrate(conn)
        await conn.execute(Q["job_session_generic_plans"])
        cases: list[tuple[str, str, Any]] = []
        for label, stmt, runner in (
            ("job_claim_queue, 1 job", Q["job_claim_queue"], one_job_claims),
            ("job_claim_batch, 100 jobs", Q["job_claim_batch"], batch_claims),
        ):
            cases += [(f"{label}, before", before(stmt), runner), (f"{label}, after", stmt, runner)]
        for setting, sql in (
            ("no job_queue row", None),
            (
                "a job_queue row (max depth)",
                "INSERT INTO job_queue (name, max_depth) VALUES ('bench', 1000000)",
            ),
            (
                "and two limited queues",
                "INSERT INTO job_queue (name, rate_max, rate_window_ms) VALUES ('rated', 100, 1000);"
                " INSERT INTO job_queue (name, concurrency_max) VALUES ('capped', 5)",
            ),
        ):
            if sql is not None:
                await conn.execute(sql)
            times: dict[str, list[float]] = {label: [] for label, _, _ in cases}
            for r in range(rounds):
                order = cases if r % 2 == 0 else list(reversed(cases))
                for label, stmt, runner in order:
                    n = claims if runner is one_job_claims else claims * 10
                    times[label].append(await runner(conn, stmt, n))
            print(f"# {setting}: median of {rounds} rounds ({claims} one-job claims, or claims of 100)")
            for label, values in times.items():
                per = ", ".join(f"{v:.0f}" for v in values)
                print(f"{label:<36} {statistics.median(values):>8.1f} us per call   ({per})")
        await conn.close()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--claims", type=int, default=3_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(run(args.claims, args.rounds))


if __name__ == "__main__":
    main()
