"""Ordered SQL migrations with a version table.

Files in `paymanager/db/versions/` are named `NNNN_description.sql` and applied in numeric order,
each in its own transaction, under an advisory lock so concurrent `migrate` runs cannot interleave.
Number ranges keep components apart: 0001-0099 foundation, 0100-0199 job engine, 0200-0299 ledger,
0300+ payments. The job engine's range migrates alone (`migrate_job_engine`, `paymanager jobs
migrate`) for programs that use the engine as a library. Why not Alembic: our schema is plain SQL
(partial indexes, CHECKs, functions) with no ORM models to autogenerate from; ordered files plus a
version table are all Alembic would give us (docs/ARCHITECTURE.md, "Migrations", says why not
yoyo-migrations or dbmate either).

Each applied file's SHA-256 is stored beside its version (`schema_migrations.checksum`, 0610). A file
whose text differs from what ran is refused by `migrate` and by every process at start
(`ChangedMigrationError`): editing an applied migration would leave databases migrated before and
after the edit with different schemas under the same version. Rows applied before the column existed
get the checksum of the file as shipped on the first `migrate` after the upgrade.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from importlib import resources

import asyncpg

from paymanager.db.pool import Conn

MIGRATIONS_PACKAGE = "paymanager.db.versions"
_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
# The job engine's migrations: `paymanager.jobs.migrate` applies these alone (a library user's
# database needs no ledger or payments tables); they refer to no table outside the set. Its range,
# and 0615, 0617, 0618 and 0619, which changed job_claim_limited from the operability range (tests/
# unit/test_migration_ranges.py finds any other migration that defines a job* object).
JOB_ENGINE_VERSIONS = frozenset(range(100, 200)) | {615, 617, 618, 619}
# Any fixed 64-bit number works; this one spells "pm-migrate" loosely and is used by nothing else.
_MIGRATION_LOCK_KEY = 0x706D5F6D69677261


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def file_name(self) -> str:
        return f"{self.version:04d}_{self.name}.sql"

    @property
    def checksum(self) -> str:
        """SHA-256 of the file's text, line endings normalised (a checkout with CRLF is the same file)."""
        return hashlib.sha256(self.sql.replace("\r\n", "\n").encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class AppliedMigration:
    version: int
    name: str
    applied_at: datetime
    # None for a row applied before checksums were stored and not yet filled in by `migrate`.
    checksum: str | None


@dataclass(frozen=True, slots=True)
class MigrationStatus:
    """One version as `paymanager migrate --status` reports it."""

    version: int
    name: str
    # applied: ran with this file's text; pending: not run yet; changed: the file differs from what ran;
    # unrecorded: ran before checksums were stored; unknown: in the database, not in this code.
    state: str
    file_checksum: str | None
    applied_checksum: str | None
    applied_at: datetime | None


class ChangedMigrationError(RuntimeError):
    """An applied migration's file no longer has the text that ran."""

    def __init__(self, changed: list[Migration]) -> None:
        self.changed = changed
        names = ", ".join(m.file_name for m in changed)
        super().__init__(
            f"applied migration file changed since it ran: {names}; restore the file as it was "
            "(a schema change goes in a new migration)"
        )


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


_COLUMNS_QUERY = """
SELECT column_name FROM information_schema.columns
WHERE table_name = 'schema_migrations' AND table_schema = current_schema()
"""

_CREATE_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


async def applied_migrations(conn: Conn) -> dict[int, AppliedMigration]:
    """Every row of the version table (empty when there is none yet)."""
    columns = {row["column_name"] for row in await conn.fetch(_COLUMNS_QUERY)}
    if not columns:
        return {}
    checksum = "checksum" if "checksum" in columns else "NULL::text AS checksum"
    rows = await conn.fetch(f"SELECT version, name, applied_at, {checksum} FROM schema_migrations")
    return {
        row["version"]: AppliedMigration(row["version"], row["name"], row["applied_at"], row["checksum"])
        for row in rows
    }


async def applied_versions(conn: Conn) -> set[int]:
    """The versions applied, in one statement (/readyz asks every few seconds, on every replica);
    none before the first migration made the table. Outside a transaction: a missing table's error
    would abort one."""
    try:
        rows = await conn.fetch("SELECT version FROM schema_migrations")
    except asyncpg.UndefinedTableError:
        return set()
    return {row["version"] for row in rows}


def changed_migrations(applied: dict[int, AppliedMigration]) -> list[Migration]:
    """The shipped migrations whose recorded checksum differs from their file's."""
    return [
        m
        for m in available_migrations()
        if (row := applied.get(m.version)) is not None
        and row.checksum is not None
        and row.checksum != m.checksum
    ]


async def migrate(conn: Conn, *, only: Callable[[int], bool] | None = None) -> list[Migration]:
    """Apply every missing migration in order (those whose version `only` accepts, when given);
    returns those applied. Safe to run concurrently.

    Refuses (`ChangedMigrationError`, nothing applied) when an applied file changed; records the
    checksum of rows that have none (applied before checksums were stored)."""
    await conn.execute("SELECT pg_advisory_lock($1)", _MIGRATION_LOCK_KEY)
    try:
        await conn.execute(_CREATE_VERSION_TABLE)
        done = await applied_migrations(conn)
        changed = changed_migrations(done)
        if changed:
            raise ChangedMigrationError(changed)
        has_checksum = await _has_checksum_column(conn)
        applied: list[Migration] = []
        for migration in available_migrations():
            if migration.version in done or (only is not None and not only(migration.version)):
                continue
            async with conn.transaction():
                await conn.execute(migration.sql)
                has_checksum = has_checksum or await _has_checksum_column(conn)
                if has_checksum:
                    await conn.execute(
                        "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
                        migration.version,
                        migration.name,
                        migration.checksum,
                    )
                else:
                    await conn.execute(
                        "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
                        migration.version,
                        migration.name,
                    )
            applied.append(migration)
        if has_checksum:
            await _record_missing_checksums(conn)
        return applied
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", _MIGRATION_LOCK_KEY)


async def migrate_job_engine(conn: Conn) -> list[Migration]:
    """Apply the job engine's missing migrations alone (JOB_ENGINE_VERSIONS); returns those applied.
    A later `migrate` adds the rest: the version table is shared."""
    return await migrate(conn, only=JOB_ENGINE_VERSIONS.__contains__)


async def _has_checksum_column(conn: Conn) -> bool:
    return any(row["column_name"] == "checksum" for row in await conn.fetch(_COLUMNS_QUERY))


async def _record_missing_checksums(conn: Conn) -> None:
    """Rows applied before the checksum column existed (or in this run before 0610 added it) take the
    checksum of the file as shipped now: the best record there is of what ran."""
    shipped = available_migrations()
    await conn.execute(
        """
        UPDATE schema_migrations AS s SET checksum = f.checksum
        FROM unnest($1::integer[], $2::text[]) AS f (version, checksum)
        WHERE s.version = f.version AND s.checksum IS NULL
        """,
        [m.version for m in shipped],
        [m.checksum for m in shipped],
    )


async def pending_migrations(conn: Conn) -> list[Migration]:
    """What `migrate` would apply now (`paymanager migrate --dry-run`)."""
    return await missing_migrations(conn)


async def migration_status(conn: Conn) -> list[MigrationStatus]:
    """Every version shipped or applied, in order, with its state and checksums."""
    applied = await applied_migrations(conn)
    shipped = {m.version: m for m in available_migrations()}
    report: list[MigrationStatus] = []
    for version in sorted(set(applied) | set(shipped)):
        row, migration = applied.get(version), shipped.get(version)
        if migration is None:
            assert row is not None
            report.append(MigrationStatus(version, row.name, "unknown", None, row.checksum, row.applied_at))
            continue
        if row is None:
            state = "pending"
        elif row.checksum is None:
            state = "unrecorded"
        elif row.checksum != migration.checksum:
            state = "changed"
        else:
            state = "applied"
        report.append(
            MigrationStatus(
                version,
                migration.name,
                state,
                migration.checksum,
                None if row is None else row.checksum,
                None if row is None else row.applied_at,
            )
        )
    return report


async def missing_migrations(conn: Conn, *, only: Callable[[int], bool] | None = None) -> list[Migration]:
    done = await applied_versions(conn)
    return [m for m in available_migrations() if m.version not in done and (only is None or only(m.version))]


async def check_schema(conn: Conn) -> None:
    """Raise `SchemaOutdatedError` when the database lacks a migration this code ships, and
    `ChangedMigrationError` when an applied migration's file differs from what ran.

    A database *newer* than the code (a migration we do not know) is accepted: during a rolling
    deploy old processes keep running beside a migrated schema, so migrations must stay additive.
    """
    applied = await applied_migrations(conn)
    changed = changed_migrations(applied)
    if changed:
        raise ChangedMigrationError(changed)
    missing = [m for m in available_migrations() if m.version not in applied]
    if missing:
        raise SchemaOutdatedError(missing)
