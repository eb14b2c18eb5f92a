"""Storage upkeep: history partitions created ahead, and churning tables vacuumed when autovacuum is off.

Every process runs it, whatever its roles (an api-only or a worker-only cluster alike needs both
duties); each duty runs once per interval over the whole cluster, whoever claims its slot first
(`storage_upkeep`). Both duties are idempotent, so a second run by accident changes nothing.

- History partitions (`ledger_transfer`, `intent`, `settlement`, migrations 0203 and 0302): the month
  of now and `HISTORY_PARTITION_MONTHS_AHEAD` months after it exist at all times, so an insert never
  finds no partition for its row. Run at start-up (`prepare`) and every `STORAGE_UPKEEP_INTERVAL_MS`.
- Churn vacuum: the rows of signatures, Idempotency-Keys and jobs are deleted within hours of their
  insert; without autovacuum their tables and indexes grow until vacuumed by hand. When autovacuum
  does not cover one of them (off on the server, or disabled on the table), a process says so once at
  start-up and the upkeep VACUUMs it every `CHURN_VACUUM_INTERVAL_MS`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import asyncpg

from paymanager.application.storage.store import CHURN_TABLES, StorageStore
from paymanager.config import Settings
from paymanager.db.pool import Pool
from paymanager.logging import get_logger

log = get_logger("paymanager.storage")

PARTITIONS_DUTY = "history-partitions"
VACUUM_DUTY = "churn-vacuum"
# The longest an attach of a new partition waits for its locks (a foreign key's attach locks the
# referenced table against writes): past it, it gives up and the next run tries again.
PARTITION_LOCK_TIMEOUT_MS = 2_000
DB_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError)

Clock = Callable[[], datetime]


def system_clock() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class UpkeepRun:
    """What one pass did: months that gained partitions (None: not this process's turn), tables vacuumed."""

    partition_months_created: int | None
    vacuumed: tuple[str, ...]


async def ensure_partitions(pool: Pool, settings: Settings, now: datetime) -> int:
    async with pool.acquire() as conn:
        return await StorageStore(conn).ensure_partitions(
            now=now, months_ahead=settings.history_partition_months_ahead,
            lock_timeout_ms=PARTITION_LOCK_TIMEOUT_MS,
        )  # fmt: skip


async def tables_without_autovacuum(pool: Pool) -> list[str]:
    async with pool.acquire() as conn:
        return await StorageStore(conn).tables_without_autovacuum(tables=CHURN_TABLES)


async def prepare(pool: Pool, settings: Settings, clock: Clock = system_clock) -> None:
    """The start-up step: partitions ahead, and the one warning when autovacuum leaves a churning table."""
    created = await ensure_partitions(pool, settings, clock())
    if created:
        log.info("history partitions created ahead", months=created)
    uncovered = await tables_without_autovacuum(pool)
    if uncovered:
        log.warning(
            "autovacuum is off for tables whose rows churn; this cluster's processes VACUUM them every "
            "CHURN_VACUUM_INTERVAL_MS, but turn autovacuum on (docs/OPERATIONS.md, 'Storage')",
            tables=uncovered,
            interval_ms=settings.churn_vacuum_interval_ms,
        )


class StorageUpkeep:
    name = "storage-upkeep"

    def __init__(self, pool: Pool, settings: Settings, clock: Clock = system_clock) -> None:
        self._pool = pool
        self._settings = settings
        self._clock = clock
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=self.name)

    async def stop(self, timeout_s: float) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def run_once(self) -> UpkeepRun:
        """Each duty whose slot is due and claimed by this process."""
        settings = self._settings
        months = None
        if await self._claim(PARTITIONS_DUTY, settings.storage_upkeep_interval_ms):
            months = await ensure_partitions(self._pool, settings, self._clock())
        vacuumed: list[str] = []
        if await self._claim(VACUUM_DUTY, settings.churn_vacuum_interval_ms):
            vacuumed = await tables_without_autovacuum(self._pool)
            if vacuumed:
                async with self._pool.acquire() as conn:
                    await StorageStore(conn).vacuum(tables=vacuumed)
        return UpkeepRun(months, tuple(vacuumed))

    async def _claim(self, duty: str, interval_ms: int) -> bool:
        async with self._pool.acquire() as conn:
            return await StorageStore(conn).claim_duty(duty=duty, now=self._clock(), interval_ms=interval_ms)

    async def _run(self) -> None:
        settings = self._settings
        tick_s = min(settings.storage_upkeep_interval_ms, settings.churn_vacuum_interval_ms) / 1000
        while True:
            await asyncio.sleep(tick_s)
            try:
                await self.run_once()
            except DB_ERRORS as exc:
                log.warning("storage upkeep failed; it runs again at the next tick", error=str(exc))
