"""The worker's leases: the attempts it holds, their heartbeat, and their release at a stop.

An attempt is held from its claim until its outcome is written (or its lease is known lost), keyed
by its context (one per attempt): one job may be held twice, an attempt whose lease was lost while
it ran (rescued) and the attempt that claimed the job again; each keeps its own slot, heartbeat and
timeout until it ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import asyncpg

from paymanager.db.pool import Pool
from paymanager.jobs._store import Lease, extend_leases, release_many
from paymanager.jobs.context import JobContext
from paymanager.jobs.events import ErrorHook, report_error
from paymanager.jobs.registry import HandlerSpec
from paymanager.logging import get_logger

log = get_logger("paymanager.jobs.leases")

# How long a stop keeps trying to give back a job whose row another transaction holds, and how often.
RELEASE_WAIT_S = 1.0
RELEASE_RETRY_S = 0.1
DB_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError)


@dataclass(eq=False, slots=True)
class Held:
    ctx: JobContext
    # The kind's registration (None: no handler is registered for it), looked up once per attempt.
    spec: HandlerSpec | None
    # Monotonic time past which the handler is cancelled as timed out (the executor's watchdog).
    deadline: float
    task: asyncio.Task[None] | None = None
    timed_out: bool = False


class Leases:
    def __init__(self, pool: Pool, *, lease_ms: int, outcome_pending: Callable[[JobContext], bool]) -> None:
        self._pool = pool
        self._lease_ms = lease_ms
        # Whether an attempt's outcome waits to be written (its lease ends with that write).
        self._outcome_pending = outcome_pending
        # Attempts running or waiting for their outcome's write, by context (one per attempt; its
        # identity hashes cheaper than its lease token, whose first hash is computed from its bytes).
        self.held: dict[JobContext, Held] = {}
        # The worker's `error` hook (Worker's on_error).
        self.on_error: ErrorHook | None = None

    def on_cancel(self, job_id: int) -> None:
        """A cancel was requested for `job_id` (NOTIFY): its running attempts see it."""
        for held in self.held.values():
            if held.ctx.id == job_id:
                held.ctx.cancelled.set()

    async def run_heartbeats(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.heartbeat()
            except DB_ERRORS as exc:
                log.warning("job heartbeat failed", error=str(exc), held=len(self.held))
                report_error(self.on_error, "heartbeat", exc)

    async def heartbeat(self) -> None:
        """Extend every held lease in one statement; flag lost leases and cancellations.

        A job whose outcome is being written is left out: the claim statement that writes it locks
        its row, and a heartbeat that waited for that lock, or held it while its own commit waited
        for a slow WAL flush, stalled the claims behind it until their lock_timeout failed them.
        Such a job needs no longer lease: its outcome is written with the next claim."""
        held = [h for h in self.held.values() if not self._outcome_pending(h.ctx)]
        if not held:
            return
        alive = await extend_leases(
            self._pool, [Lease(h.ctx.id, h.ctx.lease_token) for h in held], lease_ms=self._lease_ms
        )
        for h in held:
            token = h.ctx.lease_token
            if token not in alive:
                # Its outcome may have gone for writing while the statement ran: not lost then.
                if h.ctx in self.held and not self._outcome_pending(h.ctx):
                    h.ctx.lease_lost.set()
                    h.ctx.cancelled.set()
            elif alive[token]:
                h.ctx.cancelled.set()

    async def release(self, contexts: list[JobContext]) -> None:
        """Give the jobs back (available, the attempt not spent). The statement skips rows another
        transaction holds: a short holder (an admin query) is waited for by trying again for up to
        RELEASE_WAIT_S; a long one (a shared settlement transaction still open) is not, and its job
        is the rescuer's when its lease expires."""
        remaining = list(contexts)
        waited = 0.0
        while remaining:
            try:
                result = await release_many(self._pool, [Lease(c.id, c.lease_token) for c in remaining])
            except DB_ERRORS as exc:
                # The leases will expire and the rescuer returns the jobs; nothing is lost, only delayed.
                log.error("releasing job leases failed", error=str(exc), count=len(remaining))
                break
            # Only the rows skipped as locked are worth another try: a lease gone (rescued, claimed
            # again elsewhere) can never be released by this worker.
            remaining = [c for c in remaining if c.id in result.locked]
            if not remaining or waited >= RELEASE_WAIT_S:
                break
            await asyncio.sleep(RELEASE_RETRY_S)
            waited += RELEASE_RETRY_S
        if remaining:
            log.warning("job leases left to expire", count=len(remaining), ids=[c.id for c in remaining][:20])
        for ctx in contexts:
            self.held.pop(ctx, None)
