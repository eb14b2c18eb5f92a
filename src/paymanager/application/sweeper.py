"""The api role's sweeper: forgets signatures whose window passed and Idempotency-Keys past their TTL.

Every api replica runs one; the deletes are bounded and idempotent, so several at once only share work.
"""

from __future__ import annotations

import asyncio
import contextlib

import asyncpg

from paymanager.application.context import Payments
from paymanager.application.idempotency import keys as idempotency
from paymanager.application.services import use_cases as services
from paymanager.logging import get_logger

log = get_logger("paymanager.sweeper")

ROUNDS_PER_TICK_MAX = 100


class ApiSweeper:
    name = "api-sweeper"

    def __init__(self, payments: Payments) -> None:
        self._payments = payments
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=self.name)

    async def sweep_once(self) -> int:
        """One bounded pass; returns the rows deleted."""
        payments = self._payments
        batch = payments.settings.api_sweep_batch_size
        deleted = 0
        for prune in (services.prune_signatures, idempotency.prune):
            for _ in range(ROUNDS_PER_TICK_MAX):
                async with payments.pool.acquire() as conn:
                    count = await prune(conn, payments.clock(), batch)
                deleted += count
                if count < batch:
                    break
        return deleted

    async def _run(self) -> None:
        interval_s = self._payments.settings.api_sweep_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.sweep_once()
            except (asyncpg.PostgresError, OSError, asyncpg.InterfaceError) as exc:
                log.warning("api sweep failed", error=str(exc))

    async def stop(self, timeout_s: float) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
