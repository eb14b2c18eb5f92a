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
# Pages of idempotency_key one sweep statement reads (8 MB at most).
KEY_PAGES_PER_STATEMENT = 1_000


class ApiSweeper:
    name = "api-sweeper"

    def __init__(self, payments: Payments) -> None:
        self._payments = payments
        self._task: asyncio.Task[None] | None = None
        # The page of idempotency_key where this sweeper's walk goes on (see `_sweep_keys`).
        self._key_page = 0

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=self.name)

    async def sweep_once(self) -> int:
        """One bounded pass; returns the rows deleted."""
        payments = self._payments
        batch = payments.settings.api_sweep_batch_size
        deleted = 0
        for _ in range(ROUNDS_PER_TICK_MAX):
            async with payments.pool.acquire() as conn:
                count = await services.prune_signatures(conn, payments.clock(), batch)
            deleted += count
            if count < batch:
                break
        return deleted + await self._sweep_keys()

    async def _sweep_keys(self) -> int:
        """The next API_SWEEP_KEY_PAGES pages of idempotency_key, in statements of at most
        KEY_PAGES_PER_STATEMENT pages. The table has no index on expires_at (migration 0352): its
        expired keys are found by walking its pages, which starts over at the first page at the
        next tick once it passed the last. A walk takes the table's pages / API_SWEEP_KEY_PAGES
        ticks; meanwhile a key past its TTL is never replayed (the claim reads live keys only)."""
        payments = self._payments
        budget = payments.settings.api_sweep_key_pages
        deleted = 0
        while budget > 0:
            first = self._key_page
            end = first + min(budget, KEY_PAGES_PER_STATEMENT)
            async with payments.pool.acquire() as conn:
                count, pages = await idempotency.prune_pages(conn, payments.clock(), first, end)
            deleted += count
            budget -= end - first
            if end >= pages:
                self._key_page = 0
                break
            self._key_page = end
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
