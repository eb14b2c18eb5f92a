"""The claim of a globally limited queue alone, A/B: `job_claim_limited` as a migration defined it
("before", by default 0617) against the schema's own (the newest migration's), call by call.

    .venv/bin/python bench/limited_claim.py [--backlog 200000] [--calls 4000] [--before 0617]

One database holds `--backlog` available jobs of a queue limited to 5 running at once. Each call
completes the job its previous call claimed and claims the next, as a worker's claim does when a
job of such a queue ends (one job a cycle: the partner queue's slots free one at a time). The two
functions take turns call by call on one connection planned as the worker's pool sessions are (the
functions set generic plans themselves), so the machine's load drifts alike for both. Printed per
block of calls: the median call of each and their ratio; the blocks show how a call's cost moves as
the jobs claimed so far pile up ahead of the backlog.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import time
import uuid
from typing import Any

import asyncpg

from paymanager.db import migrations
from paymanager.db.pool import init_connection

SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"
QUEUE = "bench.capped"
CALL = "SELECT * FROM {fn}($1, 1, 'bench', 60000, false, $2, $3, NULL, true, false)"
BLOCKS = 4


def before_function(version: str) -> str:
    """The CREATE FUNCTION of job_claim_limited in migration `version`, renamed to stand beside."""
    [migration] = [m for m in migrations.available_migrations() if m.file_name.startswith(version)]
    found = re.search(r"CREATE (OR REPLACE )?FUNCTION job_claim_limited\(", migration.sql)
    if found is None:
        raise SystemExit(f"migration {migration.file_name} defines no job_claim_limited")
    body = migration.sql[found.start() :]
    return re.sub(r"FUNCTION job_claim_limited\(", "FUNCTION job_claim_limited_before(", body, count=1)


async def fill(conn: asyncpg.Connection, backlog: int) -> None:
    await conn.execute("INSERT INTO job_queue (name, concurrency_max) VALUES ($1, 5)", QUEUE)
    await conn.execute(
        "INSERT INTO job (queue, kind, state, payload)"
        " SELECT $1, 'side', 'available', '{}' FROM generate_series(1, $2)",
        QUEUE, backlog,
    )  # fmt: skip
    await conn.execute("VACUUM ANALYZE job")


async def cycle(conn: asyncpg.Connection, statement: str, held: list[Any]) -> float:
    """One call: complete what `held` holds (id, token), claim one; the time of the call in us."""
    ids = [held[0]] if held else []
    tokens = [held[1]] if held else []
    t = time.perf_counter()
    rows = await conn.fetch(statement, QUEUE, ids, tokens)
    spent = (time.perf_counter() - t) * 1e6
    held.clear()
    for row in rows:
        if row["claimed"]:
            held.extend((row["id"], row["lease_token"]))
    return spent


async def run(backlog: int, calls: int, before: str) -> None:
    name = f"pmbench_limited_{uuid.uuid4().hex[:8]}"
    server = await asyncpg.connect(SERVER)
    await server.execute(f'CREATE DATABASE "{name}"')
    try:
        conn = await asyncpg.connect(SERVER.rsplit("/", 1)[0] + f"/{name}")
        await init_connection(conn)
        await migrations.migrate_job_engine(conn)
        await conn.execute(before_function(before))
        await fill(conn, backlog)
        statements = {
            "before": CALL.format(fn="job_claim_limited_before"),
            "after": CALL.format(fn="job_claim_limited"),
        }
        held: dict[str, list[Any]] = {k: [] for k in statements}
        print(
            f"# job_claim_limited: migration {before} (before) against the schema's, {backlog} jobs waiting"
        )
        per_block = calls // BLOCKS
        for block in range(BLOCKS):
            times: dict[str, list[float]] = {k: [] for k in statements}
            for i in range(per_block):
                order = list(statements) if i % 2 == 0 else list(reversed(statements))
                for key in order:
                    times[key].append(await cycle(conn, statements[key], held[key]))
            b, a = (statistics.median(times[k]) for k in ("before", "after"))
            done = (block + 1) * per_block
            print(
                f"calls {done - per_block + 1:>6}-{done:<6} before {b:7.1f} us  after {a:7.1f} us"
                f"  after/before {a / b:.3f}"
            )
        await conn.close()
    finally:
        await server.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await server.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backlog", type=int, default=200_000)
    parser.add_argument("--calls", type=int, default=4_000)
    parser.add_argument("--before", default="0617", help="the migration whose job_claim_limited is 'before'")
    args = parser.parse_args()
    asyncio.run(run(args.backlog, args.calls, args.before))


if __name__ == "__main__":
    main()
