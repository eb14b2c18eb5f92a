"""What a handler receives: its job, progress, snooze, cancellation and the fenced completion."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, NoReturn

from paymanager.db.pool import Conn, Pool
from paymanager.jobs import _store as store
from paymanager.jobs.errors import JobCancelledError, LeaseLostError

SNOOZE_MS_MAX = 30 * 86_400_000
# ctx.log: the newest lines kept with a job, and the longest line kept (longer ones are cut).
LOG_LINES_MAX = 100
LOG_LINE_CHARS_MAX = 1_000


class SnoozeRequest(BaseException):
    """Raised by `ctx.snooze`; the worker reschedules the job without spending an attempt.

    A BaseException so a handler's broad `except Exception` cannot swallow it by accident.
    """

    def __init__(self, delay_ms: int) -> None:
        self.delay_ms = delay_ms
        super().__init__(f"snoozed for {delay_ms} ms")


@dataclass(eq=False, slots=True)
class JobContext:
    id: int
    kind: str
    queue: str
    payload: dict[str, Any]
    attempt: int
    max_attempts: int
    priority: int
    parent_id: int | None
    lease_token: uuid.UUID
    _pool: Pool
    _on_progress: Callable[[JobContext, float], Awaitable[None]]
    # The value stored as the job's result when the worker completes it (a handler's return value
    # wins when it is not None).
    result: Any = None
    # True once the handler completed its own job in its transaction (the worker then does nothing).
    completed_in_transaction: bool = False
    # The two events below are made when first asked for: most jobs never look at either, and a
    # context is made for every job claimed.
    _cancelled: asyncio.Event | None = None
    _lease_lost: asyncio.Event | None = None

    @property
    def cancelled(self) -> asyncio.Event:
        """Set when the job is cancelled while it runs (an admin `cancel`): the handler should stop."""
        if self._cancelled is None:
            self._cancelled = asyncio.Event()
        return self._cancelled

    @property
    def lease_lost(self) -> asyncio.Event:
        """Set when a heartbeat finds the lease gone: whatever the handler commits now is refused."""
        if self._lease_lost is None:
            self._lease_lost = asyncio.Event()
        return self._lease_lost

    @property
    def cancel_requested(self) -> bool:
        """`cancelled.is_set()`, without making the event."""
        return self._cancelled is not None and self._cancelled.is_set()

    async def progress(self, pct: float) -> None:
        """Record progress (0-100) on the job and publish a `progress` event."""
        if not 0 <= pct <= 100:
            raise ValueError(f"progress must be within [0, 100], got {pct}")
        found = await store.set_progress(
            self._pool, job_id=self.id, lease_token=self.lease_token, pct=float(pct)
        )
        if not found:
            self.lease_lost.set()
            raise LeaseLostError(self.id)
        await self._on_progress(self, pct)

    def snooze(self, delay_ms: int) -> NoReturn:
        """Stop now and run again in `delay_ms`, without spending an attempt (a PSP poll does this)."""
        if not 0 <= delay_ms <= SNOOZE_MS_MAX:
            raise ValueError(f"snooze delay must be within [0, {SNOOZE_MS_MAX}] ms, got {delay_ms}")
        raise SnoozeRequest(delay_ms)

    def raise_if_cancelled(self) -> None:
        if self.cancel_requested:
            raise JobCancelledError(f"job {self.id} was cancelled")

    async def complete_in(self, conn: Conn, result: Any = None) -> None:
        """Complete this job inside the caller's open transaction on `conn`, fenced by the lease.

        Raises `LeaseLostError` when the job moved on; the caller's transaction must then roll back
        (letting the error leave `async with conn.transaction()` does that).
        """
        assert conn.is_in_transaction(), "complete_in needs an open transaction on conn"
        value = result if result is not None else self.result
        done = await store.complete_fenced(conn, job_id=self.id, lease_token=self.lease_token, result=value)
        if not done:
            self.lease_lost.set()
            raise LeaseLostError(self.id)
        self.result = value
        self.completed_in_transaction = True

    @asynccontextmanager
    async def transaction(self, result: Any = None) -> AsyncIterator[Conn]:
        """`async with ctx.transaction() as conn:` the handler's effects and the job's completion
        commit together, and only while this claim still holds the lease; else `LeaseLostError`
        and nothing of the block is committed.

        The lease is checked on entry too, so a handler that stalled past its lease fails before
        doing any work; the check at the end is the one that fences.
        """
        async with self._pool.acquire() as conn, conn.transaction():
            held = await store.lease_held(conn, job_id=self.id, lease_token=self.lease_token)
            if not held:
                self.lease_lost.set()
                raise LeaseLostError(self.id)
            yield conn
            await self.complete_in(conn, result)

    async def children_results(self) -> dict[int, Any]:
        """A flow parent's children and their results, by child id."""
        return await store.children_results(self._pool, parent_id=self.id)

    async def children_failures(self) -> list[dict[str, Any]]:
        """A flow parent's dead and cancelled children (id, kind, state, last_error): what a
        parent run under the "continue" or "ignore" policy reports."""
        return await store.children_failures(self._pool, parent_id=self.id)

    async def log(self, line: str) -> None:
        """Keep `line` with the job (the newest LOG_LINES_MAX, each cut to LOG_LINE_CHARS_MAX
        characters), shown by `paymanager jobs show`. One statement per line: for a few lines
        per attempt, not a stream. LeaseLostError when the job moved on."""
        found = await store.append_log(
            self._pool, job_id=self.id, lease_token=self.lease_token, line=str(line)[:LOG_LINE_CHARS_MAX],
            keep=LOG_LINES_MAX,
        )  # fmt: skip
        if not found:
            self.lease_lost.set()
            raise LeaseLostError(self.id)
