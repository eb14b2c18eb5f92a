"""Ordered SQL migrations with a version table.

Files in `paymanager/db/versions/` are named `NNNN_description.sql` and applied in numeric order,
each in its own transaction, under an advisory lock so concurrent `migrate` runs cannot interleave.
Number ranges keep components apart: 0001-0099 foundation, 0100-0199 job engine, 0200-0299 ledger,
0300+ payments. The job engine's range migrates alone (`migrate_job_engine`, `paymanager jobs
migrate`) for programs that use the engine as a library. Why not Alembic: our schema is plain SQL
(partial indexes, CHECKs, functions) with no ORM models to autogenerate from; ordered files plus a
version table are all Alembic would give us.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources

from paymanager.db.pool import Conn

MIGRATIONS_PACKAGE = "paymanager.db.versions"
_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
# The job engine's migrations: `paymanager.jobs.migrate` applies these alone (a library user's
# database needs no ledger or payments tables); they refer to no table outside the set. Its range,
# and 0615, which changed job_claim_limited from the operability range (tests/unit/test_migration_
# ranges.py finds any other migration that defines a job* object).
JOB_ENGINE_VERSIONS = frozenset(range(100, 200)) | {615}
# Any fixed 64-bit number works; this one spells "pm-migrate" loosely and is used by nothing else.
_MIGRATION_LOCK_KEY = 0x706D5F6D69677261


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


class SchemaOutdatedError(RuntimeError):
    """The database lacks migrations this code needs."""

    def __init__(self, missing: list[Migration]) -> None:
        self.missing = missing
        names = ", ".join(f"{m.version:04d}_{m.name}" for m in missing)
        super().__init__(
            f"the database schema is older than this code (missing migrations: {names}); "
            "run `paymanager migrate` (or `make migrate`) and start again"
        )


def available_migrations() -> list[Migration]:
    found: list[Migration] = []
    for entry in resources.files(MIGRATIONS_PACKAGE).iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    assert len(versions) == len(set(versions)), f"two migrations share a version: {versions}"
    return found


_CREATE_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


async def applied_versions(conn: Conn) -> set[int]:
    exists = await conn.fetchval("SELECT to_regclass('schema_migrations') IS NOT NULL")
    if not exists:
        return set()
    rows = await conn.fetch("SELECT version FROM schema_migrations")
    return {row["version"] for row in rows}


async def migrate(conn: Conn, *, only: Callable[[int], bool] | None = None) -> list[Migration]:
    """Apply every missing migration in order (those whose version `only` accepts, when given);
    returns those applied. Safe to run concurrently."""
    await conn.execute("SELECT pg_advisory_lock($1)", _MIGRATION_LOCK_KEY)
    try:
        await conn.execute(_CREATE_VERSION_TABLE)
        done = await applied_versions(conn)
        applied: list[Migration] = []
        for migration in available_migrations():
            if migration.version in done or (only is not None and not only(migration.version)):
                continue
            async with conn.transaction():
                await conn.execute(migration.sql)
                await conn.execute(
                    "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
                    migration.version,
                    migration.name,
                )
            applied.append(migration)
        return applied
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", _MIGRATION_LOCK_KEY)


async def migrate_job_engine(conn: Conn) -> list[Migration]:
    """Apply the job engine's missing migrations alone (JOB_ENGINE_VERSIONS); returns those applied.
    A later `migrate` adds the rest: the version table is shared."""
    return await migrate(conn, only=JOB_ENGINE_VERSIONS.__contains__)


async def missing_migrations(conn: Conn, *, only: Callable[[int], bool] | None = None) -> list[Migration]:
    done = await applied_versions(conn)
    return [m for m in available_migrations() if m.version not in done and (only is None or only(m.version))]


async def check_schema(conn: Conn) -> None:
    """Raise `SchemaOutdatedError` when the database lacks a migration this code ships.

    A database *newer* than the code (a migration we do not know) is accepted: during a rolling
    deploy old processes keep running beside a migrated schema, so migrations must stay additive.
    """
    missing = await missing_migrations(conn)
    if missing:
        raise SchemaOutdatedError(missing)
