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
