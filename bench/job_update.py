"""What one UPDATE statement of a single job costs PostgreSQL: the schema's triggers against the
two flow triggers of migrations 0100 and 0104 (before 0114), in two databases, alternating.

    .venv/bin/python bench/job_update.py [--updates 10000] [--rounds 4]

Each round fills both databases' `job` with `--updates` available jobs and runs, server-side in one
plpgsql block, a claim-like and a completion-like UPDATE of each job by primary key, one statement
per job (what a claim or a completion of a single job runs: an idle worker's, a limited queue's).
None of the jobs is a flow child, so the figure is what the triggers' WHEN clauses and the rest of
the statement's set-up cost every statement. Printed per round: microseconds per statement in each
database and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

import asyncpg

from paymanager.db import migrations

SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"

# 0100's and 0104's triggers, with trigger functions of the same effect for jobs without a parent
# (none here has one): what every UPDATE compiled before 0114.
BEFORE = """
CREATE FUNCTION job_child_finished() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
CREATE FUNCTION job_child_revived() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
DROP TRIGGER job_child_moved ON job;
CREATE TRIGGER job_child_finished AFTER UPDATE OF state ON job FOR EACH ROW
    WHEN (NEW.parent_id IS NOT NULL
          AND NEW.state IN ('completed', 'dead', 'cancelled')
          AND OLD.state NOT IN ('completed', 'dead', 'cancelled'))
    EXECUTE FUNCTION job_child_finished();
CREATE TRIGGER job_child_revived AFTER UPDATE OF state ON job FOR EACH ROW
    WHEN (NEW.parent_id IS NOT NULL
          AND OLD.state IN ('completed', 'dead', 'cancelled')
          AND NEW.state NOT IN ('completed', 'dead', 'cancelled'))
    EXECUTE FUNCTION job_child_revived();
"""

UPDATES = """
DO $$
BEGIN
    FOR i IN 1..{n} LOOP
        UPDATE job SET state = 'running', attempt = attempt + 1, lease_owner = 'bench',
                       lease_token = gen_random_uuid(), lease_expires_at = now() + interval '1 minute'
         WHERE id = i;
    END LOOP;
    FOR i IN 1..{n} LOOP
        UPDATE job SET state = 'completed', finalized_at = now(), lease_owner = NULL,
                       lease_token = NULL, lease_expires_at = NULL
         WHERE id = i;
    END LOOP;
END $$
"""


async def database(server: asyncpg.Connection, before: bool) -> tuple[str, asyncpg.Connection]:
    name = f"pmbench_update_{uuid.uuid4().hex[:8]}"
    await server.execute(f'CREATE DATABASE "{name}"')
    conn = await asyncpg.connect(SERVER.rsplit("/", 1)[0] + f"/{name}")
    await migrations.migrate_job_engine(conn)
    if before:
        await conn.execute(BEFORE)
    return name, conn


async def timed_round(conn: asyncpg.Connection, n: int) -> float:
    """Microseconds per UPDATE statement over 2 * n statements."""
    await conn.execute("TRUNCATE job")
    await conn.execute(
        "INSERT INTO job (id, queue, kind, state, payload)"
        " SELECT g, 'bench', 'noop', 'available', '{}' FROM generate_series(1, $1) AS g",
        n,
    )
    await conn.execute("VACUUM ANALYZE job")
    t = time.perf_counter()
    await conn.execute(UPDATES.format(n=n))
    return (time.perf_counter() - t) * 1e6 / (2 * n)


async def run(n: int, rounds: int) -> None:
    server = await asyncpg.connect(SERVER)
    made: list[tuple[str, asyncpg.Connection]] = []
    try:
        made = [await database(server, before=True), await database(server, before=False)]
        (_, before), (_, after) = made
        print(f"# one UPDATE of one job, {2 * n} statements a round: two flow triggers (before) / 0114's one")
        ratios = []
        for r in range(rounds):
            pair = [(before, "before"), (after, "after")]
            figures = {
                label: await timed_round(conn, n) for conn, label in (pair if r % 2 == 0 else pair[::-1])
            }
            ratios.append(figures["after"] / figures["before"])
            print(
                f"round {r + 1}: before {figures['before']:6.1f} us  after {figures['after']:6.1f} us"
                f"  after/before {ratios[-1]:.3f}",
                flush=True,
            )
        print(f"median after/before {statistics.median(ratios):.3f}")
    finally:
        for name, conn in made:
            await conn.close()
            await server.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await server.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--updates", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    asyncio.run(run(args.updates, args.rounds))


if __name__ == "__main__":
    main()
