"""Writes job outcomes in batches: one statement for all completions, one for all failures.

Each statement checks the lease token, so an outcome of a claim that lost its lease changes nothing.
Events are published after the write commits; the on-dead hook runs for each job that died.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from paymanager.jobs import metrics
from paymanager.jobs._outcomes import Completion, Failure
from paymanager.jobs._pinned import PinnedConnection
from paymanager.jobs._store import complete_many, fail_many
from paymanager.jobs.context import JobContext
from paymanager.jobs.events import DeadHook, DeadJob, ErrorHook, EventPublisher, JobEvent, report_error
from paymanager.jobs.states import JobState
from paymanager.logging import get_logger

log = get_logger("paymanager.jobs.completer")

RETRY_DELAY_S = 0.5
# Event-loop turns the completer waits before writing on its own (see `run`).
CLAIM_FIRST_YIELDS = 3
# A write that keeps failing is retried this many times before its outcomes are dropped; the
# leases then expire and the rescuer hands the jobs out again (at-least-once, never lost).
WRITE_TRIES_MAX = 20

_EVENT_OF_STATE = {
    JobState.RETRYABLE: "retrying",
    JobState.DEAD: "dead",
    JobState.CANCELLED: "cancelled",
    JobState.SCHEDULED: "snoozed",
    JobState.AVAILABLE: "snoozed",
}


class Completer:
    def __init__(
        self,
        conn: PinnedConnection,
        batch_max: int,
        events: EventPublisher,
        # The worker's: the attempts are no longer held; True when their statement woke their
        # globally limited queues (the completions').
        forget: Callable[[list[JobContext], bool], None],
        requeued: Callable[[str], None],
        on_dead: DeadHook | None,
        delete_completed: bool = False,
    ) -> None:
        self._conn = conn
        # WorkerOptions.delete_completed: completions of jobs without a parent delete their rows.
        self.delete_completed = delete_completed
        self._batch_max = batch_max
        # The worker's `error` hook (Worker's on_error).
        self.on_error: ErrorHook | None = None
        self._events = events
        self._forget = forget
        self._requeued = requeued
        self._on_dead = on_dead
        self._completions: list[tuple[JobContext, Completion]] = []
        self._failures: list[tuple[JobContext, Failure]] = []
        # The attempts whose outcome waits to be written (an attempt, not a job: a worker may hold
        # two attempts of one job, the first one's lease lost), by their contexts.
        self._pending: set[JobContext] = set()
        self._ready = asyncio.Event()
        # The worker's claim statements awaiting the database, and a signal each time one comes
        # back (`claim_returned`): while one is out, its successor writes the completions.
        self.claims_out = 0
        self._claim_back = asyncio.Event()
        self._background: set[asyncio.Task[None]] = set()
        self._completed_events: list[JobEvent] = []
        self._flushing = asyncio.Lock()

    @property
    def pending(self) -> int:
        return len(self._pending)

    def is_pending(self, ctx: JobContext) -> bool:
        return ctx in self._pending

    def add(self, ctx: JobContext, outcome: Completion | Failure) -> None:
        if isinstance(outcome, Completion):
            self._completions.append((ctx, outcome))
        else:
            self._failures.append((ctx, outcome))
        self._pending.add(ctx)
        self._ready.set()

    def published_completion(self, ctx: JobContext) -> None:
        """A handler completed its job in its own transaction: only the event remains to send.

        The events of the jobs that finish in one turn of the loop (a shared settlement group's, see
        jobs/batch.py) go out together on the next turn: a NOTIFY is a transaction of its own, whose
        commit flushes the WAL under PostgreSQL's one cluster-wide NOTIFY lock, so one per job
        serialised every NOTIFYing commit of the database behind 25 of them per group."""
        metrics.count(metrics.COMPLETED, ctx.queue)
        self._completed_events.append(JobEvent("completed", ctx.id, ctx.kind, ctx.queue, ctx.attempt))
        if len(self._completed_events) == 1:
            asyncio.get_running_loop().call_soon(self._publish_completed)

    def _publish_completed(self) -> None:
        events, self._completed_events = self._completed_events, []
        task = asyncio.get_running_loop().create_task(self._events.publish(events))
        # Keep a reference until it is done: the loop holds tasks only weakly.
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def run(self) -> None:
        while True:
            await self._ready.wait()
            self._ready.clear()
            await self._let_claims_go_first()
            while self._completions or self._failures:
                await self.flush()

    async def _let_claims_go_first(self) -> None:
        """Leave the completions to the claim loop, which writes them with its next claim: for a
        few turns of the loop, and for as long as a claim is out (the one launched when it comes
        back takes them). Written here, they would cost a statement and a commit of their own, and
        a busy worker's outcomes end at any moment (a job of a limited queue beside a plain one).
        Failures are written at once."""
        while True:
            for _ in range(CLAIM_FIRST_YIELDS):
                await asyncio.sleep(0)
            if not self._completions or self._failures or self.claims_out == 0:
                return
            self._claim_back.clear()
            await self._claim_back.wait()

    def claim_sent(self) -> None:
        """A claim statement went out: it or its successor writes the pending completions."""
        self.claims_out += 1

    def claim_returned(self) -> None:
        """A claim statement came back (or failed): the claim loop launches the next one."""
        self.claims_out -= 1
        self._claim_back.set()

    async def drain(self) -> None:
        """Write everything pending (at shutdown)."""
        while self._completions or self._failures:
            await self.flush()

    async def close(self) -> None:
        await self._conn.close()

    async def flush(self) -> None:
        # `run` and `drain` (at shutdown) may both flush; they share one connection, so one at a time.
        async with self._flushing:
            await self._flush()

    async def _flush(self) -> None:
        completions = self.take_completions()
        failures = self._failures[: self._batch_max]
        del self._failures[: len(failures)]
        events: list[JobEvent] = []
        dead: list[tuple[JobContext, dict[str, Any] | None]] = []
        if completions:
            await self._write(lambda: self._complete(completions, events))
        if failures:
            await self._write(lambda: self._fail(failures, events, dead))
        completed = [ctx for ctx, _ in completions]
        failed = [ctx for ctx, _ in failures]
        self._pending.difference_update(completed + failed)
        self._forget(completed, True)
        self._forget(failed, False)
        # The dead jobs' hook (the error line operators alert on) before the events: a stop that
        # cancels this flush while it publishes then loses only events, which are best-effort.
        for ctx, error in dead:
            await self._run_dead_hook(ctx, error)
        if events:
            await self._events.publish(events, notify_completed=False)

    async def _write(self, statement: Callable[[], Awaitable[None]]) -> None:
        for attempt in range(1, WRITE_TRIES_MAX + 1):
            try:
                await statement()
                return
            except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError) as exc:
                log.warning("writing job outcomes failed", error=str(exc), attempt=attempt)
                report_error(self.on_error, "outcomes", exc)
                await asyncio.sleep(RETRY_DELAY_S)
        log.error("job outcomes dropped after repeated failures; their leases will expire")

    async def _complete(self, batch: list[tuple[JobContext, Completion]], events: list[JobEvent]) -> None:
        # A flow's child is completed, never deleted: its parent's trigger counts it.
        delete = self.delete_completed and all(ctx.parent_id is None for ctx, _ in batch)
        done = await complete_many(
            self._conn, [c for _, c in batch], notify_completed=self._events.notify_completed, delete=delete
        )
        self.completed(batch, done, events)

    def completed(
        self, batch: list[tuple[JobContext, Completion]], done: set[int], events: list[JobEvent]
    ) -> None:
        """Account for completions written (by `_complete` or piggybacked on a claim)."""
        per_queue: dict[str, int] = {}
        for ctx, _ in batch:
            if ctx.id in done:
                per_queue[ctx.queue] = per_queue.get(ctx.queue, 0) + 1
        for queue, n in per_queue.items():
            metrics.count(metrics.COMPLETED, queue, n)
        if len(done) == len(batch) and not self._events.has_redis:
            return  # The common case: every completion written, the NOTIFY sent by the statement.
        for ctx, _ in batch:
            if ctx.id in done:
                # The NOTIFY went out with the statement; Redis (when set) is sent from here.
                events.append(JobEvent("completed", ctx.id, ctx.kind, ctx.queue, ctx.attempt))
            else:
                log.warning("job completion refused: lease lost", job_id=ctx.id, kind=ctx.kind)

    def take_completions(self) -> list[tuple[JobContext, Completion]]:
        """Hand pending completions to the claim statement, which writes them with the next claim."""
        batch = self._completions[: self._batch_max]
        del self._completions[: len(batch)]
        return batch

    def put_back(self, batch: list[tuple[JobContext, Completion]]) -> None:
        """The claim statement failed: its completions wait for the next write."""
        self._completions[:0] = batch
        self._ready.set()

    async def settled(self, batch: list[tuple[JobContext, Completion]], done: set[int]) -> None:
        events: list[JobEvent] = []
        self.completed(batch, done, events)
        written = [ctx for ctx, _ in batch]
        self._pending.difference_update(written)
        self._forget(written, True)
        if events:
            await self._events.publish(events, notify=False)

    async def _fail(
        self,
        batch: list[tuple[JobContext, Failure]],
        events: list[JobEvent],
        dead: list[tuple[JobContext, dict[str, Any] | None]],
    ) -> None:
        written = await fail_many(self._conn, [f for _, f in batch])
        for ctx, failure in batch:
            if ctx.id not in written:
                continue
            message = failure.error["error"] if failure.error else None
            _count_failure(ctx.queue, failure)
            if failure.error is not None:
                events.append(JobEvent("failed", ctx.id, ctx.kind, ctx.queue, ctx.attempt, error=message))
            events.append(
                JobEvent(
                    _EVENT_OF_STATE[failure.state], ctx.id, ctx.kind, ctx.queue, ctx.attempt, error=message
                )
            )
            if failure.state is JobState.DEAD:
                dead.append((ctx, failure.error))
            if failure.state is JobState.AVAILABLE:
                self._requeued(ctx.queue)

    async def _run_dead_hook(self, ctx: JobContext, error: dict[str, Any] | None) -> None:
        if self._on_dead is None:
            return
        try:
            await self._on_dead(DeadJob(ctx.id, ctx.kind, ctx.queue, error, ctx.attempt))
        except Exception as exc:  # the hook is the caller's code: it must not stop the completer
            log.error("on-dead hook failed", job_id=ctx.id, error=repr(exc))


def _count_failure(queue: str, failure: Failure) -> None:
    if failure.error is not None:
        metrics.count(metrics.FAILED, queue)
    if failure.state is JobState.RETRYABLE:
        metrics.count(metrics.RETRIED, queue)
    elif failure.state is JobState.DEAD:
        metrics.count(metrics.DEAD, queue)
