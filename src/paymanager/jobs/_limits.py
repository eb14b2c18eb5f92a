"""A worker's view of its queues' cluster-wide limits: rate limits, global concurrency, pauses.

The limits live on the queues' rows (job_queue, migration 0110), where every process reads them. A
queue with a limit is claimed by `job_claim_limited_take` alone (the plain claim statements skip it),
one claim at a time per process: taken along by the worker's next plain claim while those go out
(job_claim_batch_limited), else by a claim of its own (job_claim_limited, here); a queue without is
claimed by the plain statements and pays nothing for the feature. The view is loaded at start, again
when a setting changes (NOTIFY on pm_job_queue), when the LISTEN connection comes back, and at every
poll while any of its queues has limits (a pause asked by a handler ends without a notification).

A queue that may not start jobs before some time (its rate window spent, or a handler's
RateLimitedError paused it) is blocked until then by a timer: no claim goes out for it meanwhile, and
the timer wakes the worker when the window opens. A queue at its global concurrency is not claimed
again until a slot frees (a worker holding all of its slots itself sends no claim for it at all): a
job of it that completes here is written by the queue's next claim (both limited claims complete
first, then count), which goes at once, or with the next plain claim when one is in flight;
elsewhere a NOTIFY says so. The statements that write completions send it
with their commit (job_claim_batch, job_complete_many, and the limited claims for the queues they
take when the claim left a slot free), and the process that wrote any other outcome sends one
(`finished`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import asyncpg

from paymanager.db.pool import Pool
from paymanager.jobs._outcomes import Completion
from paymanager.jobs._store import (
    LimitedClaim,
    claim_limited,
    pause_queue_for,
    queue_limits,
    wake_queues,
)
from paymanager.logging import get_logger

log = get_logger("paymanager.jobs.limits")

# How long a stopping worker waits for its last wakes to go out.
WAKE_AT_STOP_S = 1.0
DB_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError)


@dataclass(frozen=True, slots=True)
class QueueLimits:
    rate_max: int | None
    rate_window_ms: int | None
    concurrency_max: int | None


class LimitedQueues:
    def __init__(self, pool: Pool, queues: list[str], on_change: Callable[[str], None]) -> None:
        self._pool = pool
        self._queues = list(queues)
        # Called with a queue whose claims may go again (its path changed, or its block ended).
        self._on_change = on_change
        self.limits: dict[str, QueueLimits] = {}
        # The queues claimed by the plain statements, in the worker's order.
        self.plain: list[str] = list(queues)
        self._blocked: dict[str, asyncio.TimerHandle] = {}
        # The queues with a global concurrency: a job of one that stops running here wakes its workers.
        self.capped: frozenset[str] = frozenset()
        self._finished: set[str] = set()
        self._loading: asyncio.Task[None] | None = None
        self._load_again = False
        self._background: set[asyncio.Task[None]] = set()
        # How many limited claims and loads were done: a worker waiting for a window sends no claim.
        self.claims_sent = 0
        self.loads_done = 0

    def is_blocked(self, queue: str) -> bool:
        return queue in self._blocked

    def block(self, queue: str, ms: int) -> None:
        """Claim nothing of `queue` for `ms`; a block that ends later is kept."""
        loop = asyncio.get_running_loop()
        when = loop.time() + max(0, ms) / 1000
        current = self._blocked.get(queue)
        if current is not None:
            if current.when() >= when:
                return
            current.cancel()
        self._blocked[queue] = loop.call_at(when, self._unblock, queue)

    def _unblock(self, queue: str) -> None:
        self._blocked.pop(queue, None)
        self._on_change(queue)

    async def load(self) -> None:
        """Read the limits of the worker's queues; blocks a queue whose pause still runs."""
        rows = await queue_limits(self._pool, self._queues)
        limits = {
            row.queue: QueueLimits(row.rate_max, row.rate_window_ms, row.concurrency_max) for row in rows
        }
        changed = set(limits) ^ set(self.limits)
        self.limits = limits
        self.plain = [q for q in self._queues if q not in limits]
        self.capped = frozenset(q for q, lim in limits.items() if lim.concurrency_max is not None)
        for row in rows:
            if row.paused_ms:
                self.block(row.queue, row.paused_ms)
        self.loads_done += 1
        for queue in changed:
            self._on_change(queue)

    def request_load(self) -> None:
        """Load again soon (a setting changed): one load at a time, one more if asked meanwhile."""
        if self._loading is not None and not self._loading.done():
            self._load_again = True
            return
        self._loading = asyncio.get_running_loop().create_task(self._load_in_background())

    async def _load_in_background(self) -> None:
        while True:
            self._load_again = False
            try:
                await self.load()
            except DB_ERRORS as exc:
                # The next poll loads them again.
                log.warning("loading queue limits failed", error=str(exc))
            if not self._load_again:
                return

    async def claim(
        self,
        queue: str,
        wanted: int,
        owner: str,
        lease_ms: int,
        quick_commit: bool,
        completions: Sequence[Completion] = (),
        *,
        notify_completed: bool = True,
        delete_completed: bool = False,
    ) -> LimitedClaim:
        """Claim up to `wanted` jobs of `queue`, writing `completions` first (their slots count)."""
        claimed = await claim_limited(
            self._pool, queue=queue, wanted=wanted, owner=owner, lease_ms=lease_ms, quick_commit=quick_commit,
            completions=completions, notify_completed=notify_completed, delete_completed=delete_completed,
        )  # fmt: skip
        self.claims_sent += 1
        return claimed

    async def pause(self, queue: str, ms: int) -> None:
        """A handler's partner refused for `ms`: no process starts a job of `queue` meanwhile."""
        if queue not in self.limits:
            # Claimed by the limited path from now (where a block holds), until a load finds the
            # pause over.
            self.limits = {**self.limits, queue: QueueLimits(None, None, None)}
            self.plain = [q for q in self._queues if q not in self.limits]
        self.block(queue, ms)
        try:
            paused_ms = await pause_queue_for(self._pool, queue=queue, pause_ms=ms)
        except DB_ERRORS as exc:
            # This process keeps away; the others learn of the partner's refusal on their own.
            log.warning("pausing a rate-limited queue failed", queue=queue, error=str(exc))
            return
        self.block(queue, paused_ms)

    def finished(self, queue: str, *, woken: bool = False) -> bool:
        """A job of `queue` stopped running here: if the queue has a global concurrency, its
        workers everywhere are woken (once per turn of the loop for all such queues), unless the
        statement that wrote its outcome woke them (`woken`: the completions). True then."""
        if queue not in self.capped:
            return False
        if woken:
            return True
        if not self._finished:
            asyncio.get_running_loop().call_soon(self._send_wakes)
        self._finished.add(queue)
        return True

    def _send_wakes(self) -> None:
        queues, self._finished = sorted(self._finished), set()
        task = asyncio.get_running_loop().create_task(self._wake(queues))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _wake(self, queues: list[str]) -> None:
        try:
            await wake_queues(self._pool, queues)
        except DB_ERRORS as exc:
            # The others' polls find the free slot.
            log.warning("waking a limited queue's workers failed", queues=queues, error=str(exc))

    @property
    def wakes_on_finish(self) -> bool:
        return bool(self.capped)

    async def close(self) -> None:
        for timer in self._blocked.values():
            timer.cancel()
        self._blocked.clear()
        if self._loading is not None:
            self._loading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loading
        # The last wakes go out: the outcomes written at a stop free slots other processes wait for.
        if self._finished:
            self._send_wakes()
        if self._background:
            await asyncio.wait(self._background, timeout=WAKE_AT_STOP_S)
