"""The plain claim statements alone, A/B: before and after the queue limits (migration 0110), or
as a git revision has them against the working tree.

    .venv/bin/python bench/claim_statement.py [--claims 3000] [--rounds 5] [--against REV]

The queue limits added to the plain claims' read of the queue's row (`job_queue`) the test that
the queue has no limit. This times that statement with and without the test, in one database and
one session planned as the worker plans it (generic plans, index scans), alternating, so what it
costs a queue without limits shows apart from the noise of whole-engine runs: `job_claim_queue`
(an idle worker's one-job claim, on the enqueue-to-start path) and `job_claim_batch` (a busy
worker's claim of 100 jobs with 100 completions). Each case runs with no row for the queue in
`job_queue`, and with one (a queue with a max depth), and beside two limited queues. The two
statements take turns call by call on one connection, so the machine's load drifts alike for both;
the figure is the median call, per round, and the median of the rounds.

`--against REV`: "before" is the statement as jobs.sql has it at REV (e.g. `HEAD`), "after" the
working tree's, in the first setting only (no row for the queue): what a change of the statement's
text costs or saves, call by call, with the rows decoded as the worker decodes them.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import time
import uuid
from typing import Any

import asyncpg

from paymanager.db import migrations
from paymanager.db.pool import init_connection
from paymanager.db.sql import parse_queries
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


def before_limits(statement: str) -> str:
    """The statement as it was before the limits: the queue's row tested for `paused` alone."""
    old = statement.replace(NEW_GUARD, "q.paused)").replace(NEW_GUARD_BATCH, "q.paused)")
    assert old != statement, "the limits' guard was not found in the statement"
    return old


def at_revision(rev: str) -> dict[str, str]:
    """The engine's statements as jobs.sql has them at git revision `rev`."""
    text = subprocess.run(
        ["git", "show", f"{rev}:src/paymanager/jobs/jobs.sql"], check=True, capture_output=True, text=True
    ).stdout
    return dict(parse_queries(text, f"jobs.sql at {rev}"))


async def fill(conn: asyncpg.Connection, n: int) -> None:
    await conn.execute("TRUNCATE job")
    await conn.execute(
        "INSERT INTO job (queue, kind, payload, state) SELECT 'bench', 'noop', '{}', 'available'"
        " FROM generate_series(1, $1)",
        n,
    )
    await conn.execute("VACUUM ANALYZE job")


async def one_job_claims(conn: asyncpg.Connection, statements: tuple[str, str], n: int) -> list[list[float]]:
    """n one-job claims, the two statements taking turns call by call; each call's time (us)."""
    await fill(conn, n)
    times: list[list[float]] = [[], []]
    for i in range(n):
        started = time.perf_counter()
        await conn.fetch(statements[i % 2], "bench", 1, "bench", 30_000, True)
        times[i % 2].append((time.perf_counter() - started) * 1e6)
    return times


async def batch_claims(conn: asyncpg.Connection, statements: tuple[str, str], n: int) -> list[list[float]]:
    """Claims of 100 jobs each writing the previous claim's 100 completions and their `completed`
    events (the worker's default), taking turns."""
    await fill(conn, n)
    times: list[list[float]] = [[], []]
    held: list[tuple[int, uuid.UUID]] = []
    i = 0
    while True:
        started = time.perf_counter()
        rows = await conn.fetch(
            statements[i % 2], ["bench"], [100], "bench", 30_000,
            [h[0] for h in held], [h[1] for h in held], [None] * len(held), True, False,
        )  # fmt: skip
        times[i % 2].append((time.perf_counter() - started) * 1e6)
        i += 1
        held = [(r["id"], r["lease_token"]) for r in rows if r["claimed"]]
        if not held:
            return times


async def run(claims: int, rounds: int, against: str | None) -> None:
    old_text = at_revision(against) if against else None
    names = {Q[name]: name for name in ("job_claim_queue", "job_claim_batch")}

    def before(statement: str) -> str:
        return old_text[names[statement]] if old_text is not None else before_limits(statement)

    name = f"pmbench_claim_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(SERVER)
    await admin.execute(f'CREATE DATABASE "{name}"')
    dsn = SERVER.rsplit("/", 1)[0] + "/" + name
    try:
        conn = await asyncpg.connect(dsn)
        await init_connection(conn)
        await migrations.migrate(conn)
        await conn.execute(Q["job_session_generic_plans"])
        cases: list[tuple[str, str, Any, int]] = [
            ("job_claim_queue, 1 job", Q["job_claim_queue"], one_job_claims, claims),
            ("job_claim_batch, 100 jobs + 100 completions", Q["job_claim_batch"], batch_claims, claims * 20),
        ]
        for setting, sql in (
            ("no job_queue row", None),
            ("a job_queue row (max depth)", "INSERT INTO job_queue (name, max_depth) VALUES ('bench', 1e6)"),
            (
                "and two limited queues",
                "INSERT INTO job_queue (name, rate_max, rate_window_ms) VALUES ('rated', 100, 1000);"
                " INSERT INTO job_queue (name, concurrency_max) VALUES ('capped', 5)",
            ),
        ):
            if sql is not None:
                await conn.execute(sql)
            if old_text is not None and sql is not None:
                break
            what = f"{against} against the working tree" if against else "before and after the limits"
            print(f"# {setting}: {what}, {rounds} rounds, the statements taking turns call by call")
            for label, stmt, runner, n in cases:
                medians: list[list[float]] = [[], []]
                for r in range(rounds):
                    # Which goes first alternates too.
                    pair = (before(stmt), stmt) if r % 2 == 0 else (stmt, before(stmt))
                    first, second = await runner(conn, pair, n)
                    old, new = (first, second) if r % 2 == 0 else (second, first)
                    medians[0].append(statistics.median(old))
                    medians[1].append(statistics.median(new))
                b, a = statistics.median(medians[0]), statistics.median(medians[1])
                print(
                    f"{label:<46} before {b:8.1f} us  after {a:8.1f} us  after/before {a / b:.3f}"
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
    parser.add_argument("--claims", type=int, default=3_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--against", help="a git revision whose claim statements are 'before'")
    args = parser.parse_args()
    asyncio.run(run(args.claims, args.rounds, args.against))


if __name__ == "__main__":
    main()
