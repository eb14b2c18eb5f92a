from __future__ import annotations

import asyncio

import asyncpg
import pytest

from paymanager.db import migrations
from tests.support.databases import DatabaseFactory


async def test_migrate_applies_every_migration_once(database_factory: DatabaseFactory) -> None:
    url = await database_factory.create_empty()
    try:
        conn = await asyncpg.connect(url)
        try:
            applied = await migrations.migrate(conn)
            assert [m.version for m in applied] == [m.version for m in migrations.available_migrations()]
            assert await migrations.migrate(conn) == []
            await migrations.check_schema(conn)
        finally:
            await conn.close()
    finally:
        await database_factory.drop(url)


async def test_concurrent_migrate_runs_do_not_interleave(database_factory: DatabaseFactory) -> None:
    url = await database_factory.create_empty()
    try:
        conns = [await asyncpg.connect(url) for _ in range(3)]
        try:
            results = await asyncio.gather(*(migrations.migrate(c) for c in conns))
            assert sum(len(r) for r in results) == len(migrations.available_migrations())
        finally:
            for c in conns:
                await c.close()
    finally:
        await database_factory.drop(url)


async def test_missing_migration_is_refused_with_the_migrate_hint(conn: asyncpg.Connection) -> None:
    newest = migrations.available_migrations()[-1]
    await conn.execute("DELETE FROM schema_migrations WHERE version = $1", newest.version)
    with pytest.raises(migrations.SchemaOutdatedError, match="run `paymanager migrate`"):
        await migrations.check_schema(conn)


async def test_missing_migrations_names_the_unapplied_ones_in_one_statement(conn: asyncpg.Connection) -> None:
    newest = migrations.available_migrations()[-1]
    await conn.execute("DELETE FROM schema_migrations WHERE version = $1", newest.version)
    statements: list[str] = []
    conn.add_query_logger(lambda record: statements.append(record.query))
    assert await migrations.missing_migrations(conn) == [newest]
    await asyncio.sleep(0)  # asyncpg hands each record to the logger with call_soon
    assert len(statements) == 1  # /readyz runs this on every probe


async def test_missing_migrations_of_an_empty_database_are_all_of_them(
    database_factory: DatabaseFactory,
) -> None:
    url = await database_factory.create_empty()
    try:
        conn = await asyncpg.connect(url)
        try:
            assert await migrations.missing_migrations(conn) == migrations.available_migrations()
        finally:
            await conn.close()
    finally:
        await database_factory.drop(url)


# --- checksums, status, dry run -------------------------------------------------------------------

CHECKSUMS_VERSION = 610
A_SHA256 = "f" * 64


def test_checksum_follows_the_text_not_its_line_endings() -> None:
    first = migrations.available_migrations()[0]
    edited = migrations.Migration(first.version, first.name, first.sql + "\n-- an edit\n")
    crlf = migrations.Migration(first.version, first.name, first.sql.replace("\n", "\r\n"))
    assert edited.checksum != first.checksum
    assert crlf.checksum == first.checksum
    assert len(first.checksum) == 64


async def _recorded(conn: asyncpg.Connection) -> dict[int, str | None]:
    rows = await conn.fetch("SELECT version, checksum FROM schema_migrations")
    return {row["version"]: row["checksum"] for row in rows}


async def test_migrate_records_the_checksum_of_every_file(conn: asyncpg.Connection) -> None:
    assert await _recorded(conn) == {m.version: m.checksum for m in migrations.available_migrations()}


async def test_a_database_migrated_before_checksums_gets_them_on_the_first_migrate(
    database_factory: DatabaseFactory,
) -> None:
    url = await database_factory.create_empty()
    try:
        conn = await asyncpg.connect(url)
        try:
            # The runner of the previous release: no checksum column, rows of (version, name).
            await conn.execute(migrations._CREATE_VERSION_TABLE)
            older = [m for m in migrations.available_migrations() if m.version < CHECKSUMS_VERSION]
            for migration in older:
                await conn.execute(migration.sql)
                await conn.execute(
                    "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
                    migration.version,
                    migration.name,
                )
            status = {row.version: row.state for row in await migrations.migration_status(conn)}
            assert {status[m.version] for m in older} == {"unrecorded"}
            would_apply = [m.version for m in await migrations.pending_migrations(conn)]
            applied = await migrations.migrate(conn)
            assert [m.version for m in applied] == would_apply
            assert [m.version for m in applied] == [
                m.version for m in migrations.available_migrations() if m.version >= CHECKSUMS_VERSION
            ]
            assert await _recorded(conn) == {m.version: m.checksum for m in migrations.available_migrations()}
            await migrations.check_schema(conn)
        finally:
            await conn.close()
    finally:
        await database_factory.drop(url)


async def test_a_changed_applied_file_is_refused_at_start_and_by_migrate(conn: asyncpg.Connection) -> None:
    target, newest = migrations.available_migrations()[1], migrations.available_migrations()[-1]
    # What ran differs from the file shipped: as if the file had been edited after it was applied.
    await conn.execute(
        "UPDATE schema_migrations SET checksum = $1 WHERE version = $2", A_SHA256, target.version
    )
    await conn.execute("DELETE FROM schema_migrations WHERE version = $1", newest.version)
    with pytest.raises(migrations.ChangedMigrationError, match=target.file_name):
        await migrations.check_schema(conn)
    with pytest.raises(migrations.ChangedMigrationError, match=target.file_name):
        await migrations.migrate(conn)
    assert newest.version not in await _recorded(conn), "a refused migrate applies nothing"


async def test_status_names_each_state_and_dry_run_lists_the_pending(
    conn: asyncpg.Connection,
) -> None:
    shipped = migrations.available_migrations()
    changed, unrecorded, pending = shipped[1], shipped[2], shipped[-1]
    await conn.execute(
        "UPDATE schema_migrations SET checksum = $1 WHERE version = $2", A_SHA256, changed.version
    )
    await conn.execute("UPDATE schema_migrations SET checksum = NULL WHERE version = $1", unrecorded.version)
    await conn.execute("DELETE FROM schema_migrations WHERE version = $1", pending.version)
    await conn.execute("INSERT INTO schema_migrations (version, name) VALUES (9999, 'from_a_newer_release')")

    report = {row.version: row for row in await migrations.migration_status(conn)}
    assert report[changed.version].state == "changed"
    assert report[changed.version].applied_checksum == A_SHA256
    assert report[changed.version].file_checksum == changed.checksum
    assert report[unrecorded.version].state == "unrecorded"
    assert report[pending.version].state == "pending"
    assert report[pending.version].applied_at is None
    assert report[9999].state == "unknown"
    assert report[shipped[0].version].state == "applied"
    assert report[shipped[0].version].applied_checksum == shipped[0].checksum

    assert [m.version for m in await migrations.pending_migrations(conn)] == [pending.version]
