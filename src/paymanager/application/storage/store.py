"""The storage store: the only reader of `storage.sql` (partitions ahead, autovacuum, duty slots)."""

from __future__ import annotations

from datetime import datetime

from paymanager.db.pool import Conn
from paymanager.db.sql import load_queries

Q = load_queries("paymanager.application.storage", "storage.sql")

# The tables whose rows churn (inserted, then deleted within hours): without autovacuum they bloat
# until someone vacuums them.
CHURN_TABLES = ("idempotency_key", "intent_due", "job", "request_signature")


class StorageStore:
    __slots__ = ("_conn",)

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    async def ensure_partitions(self, *, now: datetime, months_ahead: int, lock_timeout_ms: int) -> int:
        """Create the missing history partitions up to `months_ahead` months after `now`'s; how many
        months gained one. Opens its own transaction."""
        async with self._conn.transaction():
            await self._conn.fetchval(Q["storage_lock_timeout_set"], f"{lock_timeout_ms}ms")
            created: int = await self._conn.fetchval(Q["storage_partitions_ensure"], now, months_ahead)
        return created

    async def tables_without_autovacuum(self, *, tables: tuple[str, ...]) -> list[str]:
        rows = await self._conn.fetch(Q["storage_tables_without_autovacuum"], list(tables))
        return [row["name"] for row in rows]

    async def vacuum(self, *, tables: list[str]) -> None:
        """A plain VACUUM (ANALYZE) of `tables`, each one of CHURN_TABLES (names are not parameters
        in SQL, so they are checked against that list before they are written into the statement)."""
        assert tables, "nothing to vacuum"
        assert set(tables) <= set(CHURN_TABLES), tables
        await self._conn.execute("VACUUM (ANALYZE) " + ", ".join(f'"{name}"' for name in tables))

    async def attached_partitions(self, *, names: list[str]) -> set[str]:
        return {row["name"] for row in await self._conn.fetch(Q["storage_partitions_attached"], names)}

    async def existing_tables(self, *, names: list[str]) -> set[str]:
        return {row["name"] for row in await self._conn.fetch(Q["storage_tables_existing"], names)}

    # Table names are not parameters in SQL: the statements below write them in, quoted, and take them
    # only from archive.py, which builds them from a checked month (`partition_suffix`).

    async def detach_concurrently(self, *, parent: str, partition: str) -> None:
        """`DETACH PARTITION ... CONCURRENTLY`: outside any transaction, it locks out no writer."""
        await self._conn.execute(f'ALTER TABLE "{parent}" DETACH PARTITION "{partition}" CONCURRENTLY')

    async def count(self, *, partition: str, where: str = "true") -> int:
        """Rows of `partition` matching `where` (a fixed condition of archive.py)."""
        counted: int = await self._conn.fetchval(f'SELECT count(*) FROM "{partition}" WHERE {where}')
        return counted

    async def release(self, *, partition: str) -> None:
        await self._conn.fetchval(Q["storage_partition_release"], partition)

    async def archive_ledger(self, *, partition: str) -> None:
        await self._conn.fetchval(Q["storage_ledger_archive"], partition)

    async def ledger_archived(self, *, partition: str) -> bool:
        return bool(await self._conn.fetchval(Q["storage_ledger_archived"], partition))

    async def claim_duty(self, *, duty: str, now: datetime, interval_ms: int) -> bool:
        return bool(await self._conn.fetchval(Q["storage_duty_claim"], duty, now, interval_ms))
