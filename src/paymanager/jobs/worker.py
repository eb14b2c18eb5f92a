"""The worker: one asyncio loop per process serving several queues, each with its own concurrency.

The fetch loop claims, in ONE statement, as many jobs as there are free slots over all queues that
may have work (a NOTIFY or a poll says so); each job runs in its own task; outcomes are written in
batches by the completer (`_completer.py`); a heartbeat extends every held lease in one statement.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import asyncpg

from paymanager.db.pool import Pool
from paymanager.jobs._completer import Completer
from paymanager.jobs._listener import Listener
from paymanager.jobs._outcomes import Completion, Failure, decide_failure, snooze
from paymanager.jobs._queries import CHANNEL_AVAILABLE, CHANNEL_CANCEL, Q
from paymanager.jobs.backoff import backoff_from_json
from paymanager.jobs.context import JobContext, SnoozeRequest
from paymanager.jobs.errors import LeaseLostError, PermanentError
from paymanager.jobs.events import DeadHook, EventPublisher, JobEvent
from paymanager.jobs.options import CONCURRENCY_MAX, WorkerOptions
from paymanager.jobs.registry import Registry
from paymanager.logging import get_logger

log = get_logger("paymanager.jobs.worker")

# While this many outcomes wait to be written, the worker claims no more (back-pressure).
PENDING_OUTCOMES_MAX = 5_000
DB_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError)


@dataclass(eq=False)
class _Held:
    ctx: JobContext
    task: asyncio.Task[None] | None = None


class Worker:
    """Runs registered handlers for jobs of `queues` (queue -> concurrency). A runtime Service."""

    name = "job-worker"

    def __init__(
        self,
        pool: Pool,
        dsn: str,
        registry: Registry,
        queues: dict[str, int],
        options: WorkerOptions | None = None,
        *,
        on_dead: DeadHook | None = None,
    ) -> None:
        if not queues:
            raise ValueError("a worker needs at least one queue")
        for queue, concurrency in queues.items():
            if not 1 <= concurrency <= CONCURRENCY_MAX:
                raise ValueError(f"concurrency of queue {queue!r} must be within [1, {CONCURRENCY_MAX}]")
        self._pool = pool
        self._registry = registry
        self._options = options or WorkerOptions()
        self._limits = dict(queues)
        self._free = dict(queues)
        self._maybe_work = dict.fromkeys(queues, True)
        self._notified = dict.fromkeys(queues, 0)
        self._held: dict[int, _Held] = {}
        self._wake = asyncio.Event()
        self._stopping = False
        self._tasks: list[asyncio.Task[None]] = []
        self._threads = ThreadPoolExecutor(self._options.sync_threads, thread_name_prefix="job-sync")
        self.events = EventPublisher(pool, self._options.redis_url)
        self._completer = Completer(
            pool, self._options.complete_batch_max, self.events, self._forget, self._requeued, on_dead
        )
        self._listener = Listener(
            dsn,
            {CHANNEL_AVAILABLE: self._on_available, CHANNEL_CANCEL: self._on_cancel},
            self._on_reconnect,
            self._options.listener_check_interval_ms / 1000,
        )

    @property
    def listener(self) -> Listener:
        return self._listener

    @property
    def running_count(self) -> int:
        return len(self._held)

    async def start(self) -> None:
        await self.events.start()
        await self._listener.start()
        self._tasks = [
            asyncio.create_task(self._fetch_loop(), name="job-fetch"),
            asyncio.create_task(self._heartbeat_loop(), name="job-heartbeat"),
            asyncio.create_task(self._completer.run(), name="job-completer"),
        ]
        log.info("job worker started", queues=self._limits, owner=self._options.owner)

    async def stop(self, timeout_s: float) -> None:
        """Stop claiming; let running jobs finish within `timeout_s`; give the rest back at once."""
        self._stopping = True
        self._wake.set()
        fetch = self._tasks[0] if self._tasks else None
        if fetch is not None:
            await asyncio.gather(fetch, return_exceptions=True)
        running = [h.task for h in self._held.values() if h.task is not None and not h.task.done()]
        if running:
            await asyncio.wait(running, timeout=max(0.0, timeout_s))
        unfinished = [h for h in self._held.values() if h.task is not None and not h.task.done()]
        for held in unfinished:
            held.task.cancel()  # type: ignore[union-attr]
        if unfinished:
            await asyncio.wait([h.task for h in unfinished if h.task is not None], timeout=1)
        await self._completer.drain()
        await self._release([h.ctx for h in unfinished])
        for task in self._tasks[1:]:
            task.cancel()
        await asyncio.gather(*self._tasks[1:], return_exceptions=True)
        await self._listener.stop()
        await self.events.close()
        self._threads.shutdown(wait=False, cancel_futures=True)
        log.info("job worker stopped", released=len(unfinished))

    # --- notifications -----------------------------------------------------------------------------

    def _on_available(self, queue: str) -> None:
        if queue in self._limits:
            self._maybe_work[queue] = True
            self._notified[queue] += 1
            self._wake.set()

    def _on_cancel(self, payload: str) -> None:
        with contextlib.suppress(ValueError):
            held = self._held.get(int(payload))
            if held is not None:
                held.ctx.cancelled.set()

    def _on_reconnect(self) -> None:
        # Notifications sent while the listener was down are lost: look at every queue once.
        for queue in self._limits:
            self._maybe_work[queue] = True
        self._wake.set()

    # --- claiming ----------------------------------------------------------------------------------

    async def _fetch_loop(self) -> None:
        poll_s = self._options.poll_interval_ms / 1000
        next_poll = time.monotonic() + poll_s
        while not self._stopping:
            if time.monotonic() >= next_poll:
                await self._poll_tick()
                next_poll = time.monotonic() + poll_s
            try:
                claimed_all = await self._claim()
            except DB_ERRORS as exc:
                log.warning("job claim failed", error=str(exc))
                claimed_all = False
                await asyncio.sleep(min(poll_s, 1.0))
            if claimed_all or self._stopping:
                continue
            self._wake.clear()
            if self._claimable():
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=max(0.0, next_poll - time.monotonic()))

    async def _poll_tick(self) -> None:
        """The fallback: promote due jobs and look at every queue, as if notified."""
        for queue in self._limits:
            self._maybe_work[queue] = True
        try:
            await self._pool.fetch(Q["job_promote_due"], None, self._options.promote_batch_max)
        except DB_ERRORS as exc:
            log.warning("promoting due jobs failed", error=str(exc))

    def _claimable(self) -> bool:
        if self._completer.pending > PENDING_OUTCOMES_MAX:
            return False
        return any(self._free[q] > 0 and self._maybe_work[q] for q in self._limits)

    async def _claim(self) -> bool:
        """Claim up to the free slots; True when every slot asked for was filled (more may wait)."""
        if not self._claimable():
            return False
        queues: list[str] = []
        wanted: list[int] = []
        budget = self._options.claim_batch_max
        for queue in self._limits:
            n = min(self._free[queue], budget)
            if n > 0 and self._maybe_work[queue]:
                queues.append(queue)
                wanted.append(n)
                budget -= n
        if not queues:
            return False
        seen = {q: self._notified[q] for q in queues}
        rows = await self._pool.fetch(
            Q["job_claim_batch"], queues, wanted, self._options.owner, self._options.lease_ms
        )
        got: dict[str, int] = dict.fromkeys(queues, 0)
        for row in rows:
            got[row["queue"]] += 1
            self._begin(row)
        for queue, n in zip(queues, wanted, strict=True):
            # Fewer than asked: the queue is drained, unless a NOTIFY arrived while we asked.
            if got[queue] < n and self._notified[queue] == seen[queue]:
                self._maybe_work[queue] = False
        return sum(got.values()) == sum(wanted)

    def _begin(self, row: asyncpg.Record) -> None:
        spec = self._registry.get(row["kind"])
        max_attempts = row["max_attempts"] or (spec.max_attempts if spec else None)
        ctx = JobContext(
            id=row["id"],
            kind=row["kind"],
            queue=row["queue"],
            payload=row["payload"],
            attempt=row["attempt"],
            max_attempts=max_attempts or self._options.default_max_attempts,
            priority=row["priority"],
            parent_id=row["parent_id"],
            lease_token=row["lease_token"],
            _pool=self._pool,
            _on_progress=self._on_progress,
        )
        if row["cancel_requested"]:
            ctx.cancelled.set()
        self._free[ctx.queue] -= 1
        held = _Held(ctx)
        self._held[ctx.id] = held
        held.task = asyncio.create_task(self._run(ctx, row["timeout_ms"], row["backoff"]))

    # --- running -----------------------------------------------------------------------------------

    async def _run(self, ctx: JobContext, timeout_ms: int | None, backoff: dict[str, Any] | None) -> None:
        spec = self._registry.get(ctx.kind)
        try:
            if spec is None:
                raise PermanentError(f"no handler is registered for job kind {ctx.kind!r}")
            timeout_s = (timeout_ms or spec.timeout_ms or self._options.default_timeout_ms) / 1000
            async with asyncio.timeout(timeout_s):
                if spec.is_async:
                    value = await spec.handler(ctx)
                else:
                    loop = asyncio.get_running_loop()
                    value = await loop.run_in_executor(self._threads, spec.handler, ctx)
        except SnoozeRequest as request:
            self._settle(ctx, snooze(ctx.id, ctx.lease_token, request.delay_ms))
        except LeaseLostError:
            log.warning("job lease lost; its effects were not committed", job_id=ctx.id, kind=ctx.kind)
            self._forget([ctx.id])
        except asyncio.CancelledError:
            # Shutdown past its timeout: `stop` gives the lease back; nothing is written here.
            if not self._stopping:
                raise
        except Exception as exc:  # a handler's exception never crashes the worker
            chosen = backoff_from_json(backoff) if backoff else (spec.backoff if spec else None)
            failure = decide_failure(
                ctx.id, ctx.lease_token, exc, attempt=ctx.attempt, max_attempts=ctx.max_attempts,
                backoff=chosen or self._options.default_backoff, cancel_requested=ctx.cancelled.is_set(),
            )  # fmt: skip
            self._settle(ctx, failure)
        else:
            if ctx.completed_in_transaction:
                self._completer.published_completion(ctx)
                self._forget([ctx.id])
            else:
                result = value if value is not None else ctx.result
                self._settle(ctx, Completion(ctx.id, ctx.lease_token, result))

    def _settle(self, ctx: JobContext, outcome: Completion | Failure) -> None:
        """Hand the outcome to the completer and free the slot (the job stays held until written)."""
        self._completer.add(ctx, outcome)
        self._free[ctx.queue] += 1
        held = self._held.get(ctx.id)
        if held is not None:
            held.task = None
        self._wake.set()

    def _forget(self, job_ids: list[int]) -> None:
        """The jobs' outcomes are written (or their leases are gone): they are no longer held."""
        for job_id in job_ids:
            held = self._held.pop(job_id, None)
            if held is not None and held.task is not None:
                # Still counted as running: the slot frees here (lease lost, or completed in its tx).
                self._free[held.ctx.queue] += 1
                self._wake.set()

    def _requeued(self, queue: str) -> None:
        if queue in self._maybe_work:
            self._maybe_work[queue] = True
            self._notified[queue] += 1
            self._wake.set()

    async def _on_progress(self, ctx: JobContext, pct: float) -> None:
        await self.events.publish([JobEvent("progress", ctx.id, ctx.kind, ctx.queue, ctx.attempt, pct)])

    # --- leases ------------------------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        interval_s = self._options.heartbeat_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.heartbeat()
            except DB_ERRORS as exc:
                log.warning("job heartbeat failed", error=str(exc), held=len(self._held))

    async def heartbeat(self) -> None:
        """Extend every held lease in one statement; flag lost leases and cancellations."""
        held = list(self._held.values())
        if not held:
            return
        rows = await self._pool.fetch(
            Q["job_heartbeat_many"],
            [h.ctx.id for h in held],
            [h.ctx.lease_token for h in held],
            self._options.lease_ms,
        )
        alive = {row["id"]: row["cancel_requested"] for row in rows}
        for h in held:
            if h.ctx.id not in alive:
                if h.ctx.id in self._held and not self._completer.is_pending(h.ctx.id):
                    h.ctx.lease_lost.set()
                    h.ctx.cancelled.set()
            elif alive[h.ctx.id]:
                h.ctx.cancelled.set()

    async def _release(self, contexts: list[JobContext]) -> None:
        if not contexts:
            return
        try:
            await self._pool.fetch(
                Q["job_release_many"], [c.id for c in contexts], [c.lease_token for c in contexts]
            )
        except DB_ERRORS as exc:
            # The leases will expire and the rescuer returns the jobs; nothing is lost, only delayed.
            log.error("releasing job leases failed", error=str(exc), count=len(contexts))
        for ctx in contexts:
            self._held.pop(ctx.id, None)
