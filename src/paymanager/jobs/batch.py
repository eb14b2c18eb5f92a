"""Several running jobs sharing one transaction, each still fenced by its own lease.

A handler that commits its effects with `ctx.transaction()` pays a transaction (BEGIN, lease check,
effects, fenced completion, COMMIT and its WAL flush) per job. When many jobs of one kind run at once
in a worker, `SharedTransactions` lets their handlers hand their work to one task that runs it for a
group of them in ONE transaction:

1. `hold_leases` locks (FOR UPDATE, in id order, one statement) the job rows still held under each
   claim's lease token. A job missing lost its lease: its `ctx.lease_lost` is set and its caller gets
   `LeaseLostError`; nothing is done for it. A job returned cannot lose its lease before the
   transaction ends: the rescuer skips locked rows (`FOR UPDATE SKIP LOCKED`), and after the
   commit the job is completed (after a rollback, still running under this claim). So an open group
   delays the rescue of its jobs until it ends; a killed process's connection drops and PostgreSQL
   aborts its transaction, releasing them.
2. The work function runs for the jobs held, on the shared connection, and returns one outcome per job:
   its result, or an exception (an expected failure of that job alone). A job whose outcome is an
   exception must have no effect in the transaction: the work function guarantees it (payments does
   so by checking each item before writing and by the ledger's per-chain results; see
   settle_intent.settle_many); the job is not completed and its caller gets its exception, so the
   worker retries or dead-letters it as usual.
3. `complete_all_in` completes the jobs that succeeded in one statement, with the same fence, and marks
   each `ctx.completed_in_transaction` as `JobContext.complete_in` does.
4. COMMIT: every held job's effects and completion commit together, or none do. An error of the
   statement machinery itself (not an outcome) fails the whole group; each caller gets it and nothing
   of the group was committed. A deadlock (with a heartbeat that locks the same job rows in another
   order) is retried from the start, at most `ATTEMPTS_MAX` times.
5. Each caller gets its own outcome; then `after_commit` runs with the results committed (best effort:
   a failure there is logged, never undoes or retries the commit).

Limits: at most `batch_max` jobs per transaction and `batches_in_flight_max` transactions at once per
`SharedTransactions`; while the limit is reached, new work waits and joins the next group (group
commit: a busier worker makes bigger groups); a group starts on the loop's next turn, so handlers
started together share it. The waiting work is bounded by the worker's concurrency (one item per
running handler). A caller cancelled before its group starts is dropped.

The grouping itself (the waiting queue, the limits, the start on the next turn, one outcome per
caller) is `GroupRunner`, which any step that many handlers run at once can use without a fenced
transaction (the session actions' write-ahead does: application/sessions/write_ahead.py).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import asyncpg

from paymanager.db.pool import Conn, Pool
from paymanager.jobs import _store as store
from paymanager.jobs._outcomes import Completion
from paymanager.jobs.context import JobContext
from paymanager.jobs.errors import LeaseLostError
from paymanager.logging import get_logger
from paymanager.tracing import current_span_context
from paymanager.tracing import enabled as tracing_enabled
from paymanager.tracing import span as trace_span

log = get_logger("paymanager.jobs.batch")

BATCH_MAX_LIMIT = 1_000
BATCHES_IN_FLIGHT_LIMIT = 64
ATTEMPTS_MAX = 3

W = TypeVar("W")
R = TypeVar("R")

# The shared work: (context, item) of each job held, in the order given -> one outcome per job.
BatchWork = Callable[[Conn, list[tuple[JobContext, W]]], Awaitable[list[R | Exception]]]
AfterCommit = Callable[[list[R]], Awaitable[None]]


async def hold_leases(conn: Conn, ctxs: Sequence[JobContext]) -> list[JobContext]:
    """Lock the job rows of `ctxs` still held by their claims, in ONE statement; returns those held
    (in the order given). The others get `lease_lost` set: their callers must raise `LeaseLostError`."""
    assert conn.is_in_transaction(), "hold_leases needs an open transaction on conn"
    if not ctxs:
        return []
    # By (id, token): a worker may hold two attempts of one job, the first one's lease lost.
    pairs = await store.hold_leases(conn, [store.Lease(c.id, c.lease_token) for c in ctxs])
    held = []
    for ctx in ctxs:
        if (ctx.id, ctx.lease_token) in pairs:
            held.append(ctx)
        else:
            ctx.lease_lost.set()
    return held


async def complete_all_in(conn: Conn, ctxs: Sequence[JobContext]) -> None:
    """Complete `ctxs` inside the caller's open transaction in ONE statement, fenced by each lease
    (with `ctx.result` as the result). Raises `LeaseLostError` if one of them moved on: the caller's
    transaction must then roll back, as with `complete_in`. After `hold_leases` that cannot happen."""
    assert conn.is_in_transaction(), "complete_all_in needs an open transaction on conn"
    if not ctxs:
        return
    # The worker's own batched completion; no `completed` events from the statement: the worker
    # publishes them for jobs completed in their transaction (`published_completion`), as for
    # `complete_in`.
    done = await store.complete_many(
        conn, [Completion(c.id, c.lease_token, c.result) for c in ctxs], notify_completed=False
    )
    lost = [ctx for ctx in ctxs if ctx.id not in done]
    for ctx in lost:
        ctx.lease_lost.set()
    if lost:
        raise LeaseLostError(lost[0].id)
    for ctx in ctxs:
        ctx.completed_in_transaction = True


T = TypeVar("T")
U = TypeVar("U")

# The work of one group: its items, in the order submitted -> one outcome per item (its result, or
# an exception for that item alone). Raising fails every item of the group with the exception.
GroupWork = Callable[[list[T]], Awaitable[Sequence[U | Exception]]]
AfterGroup = Callable[[list[U]], Awaitable[None]]


@dataclass(eq=False, slots=True)
class _Waiting(Generic[T, U]):
    item: T
    outcome: asyncio.Future[U]


class GroupRunner(Generic[T, U]):
    """Runs the items that concurrently running tasks of one process submit in groups.

    `await runner.submit(item)` queues the item and returns its own outcome (or raises its own
    exception). A group starts on the loop's next turn, so the tasks one claim started share it; it
    takes at most `batch_max` items, and at most `batches_in_flight_max` groups run at once: while
    the limit is reached, new items wait and join the next group (a busier process makes bigger
    groups). An item whose caller was cancelled before its group started is dropped. When the group
    is done, `after_group` (if given) runs with the results of the items that succeeded, best
    effort: a failure there is logged and changes no outcome."""

    def __init__(
        self,
        work: GroupWork[T, U],
        *,
        batch_max: int,
        batches_in_flight_max: int,
        after_group: AfterGroup[U] | None = None,
    ) -> None:
        assert 1 <= batch_max <= BATCH_MAX_LIMIT, batch_max
        assert 1 <= batches_in_flight_max <= BATCHES_IN_FLIGHT_LIMIT, batches_in_flight_max
        self._work = work
        self._after_group = after_group
        self._batch_max = batch_max
        self._batches_in_flight_max = batches_in_flight_max
        self._batches_in_flight = 0
        self._waiting: deque[_Waiting[T, U]] = deque()
        self._tasks: set[asyncio.Task[None]] = set()

    async def submit(self, item: T) -> U:
        loop = asyncio.get_running_loop()
        waiting: _Waiting[T, U] = _Waiting(item, loop.create_future())
        self._waiting.append(waiting)
        # Start on the next turn of the loop, so that the tasks the worker started together (one
        # claim) join one group rather than the first of them running alone.
        loop.call_soon(self._start_groups)
        return await waiting.outcome

    def _start_groups(self) -> None:
        while self._waiting and self._batches_in_flight < self._batches_in_flight_max:
            group: list[_Waiting[T, U]] = []
            while self._waiting and len(group) < self._batch_max:
                waiting = self._waiting.popleft()
                if not waiting.outcome.done():  # a caller cancelled while waiting is dropped
                    group.append(waiting)
            if not group:
                return
            self._batches_in_flight += 1
            task = asyncio.create_task(self._run_group(group))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run_group(self, group: list[_Waiting[T, U]]) -> None:
        succeeded: list[U] = []
        try:
            outcomes = await self._work([waiting.item for waiting in group])
            assert len(outcomes) == len(group), "the work returns one outcome per item"
            for waiting, outcome in zip(group, outcomes, strict=True):
                if isinstance(outcome, Exception):
                    _set_exception(waiting.outcome, outcome)
                else:
                    succeeded.append(outcome)
                    if not waiting.outcome.done():
                        waiting.outcome.set_result(outcome)
        except Exception as exc:
            for waiting in group:
                _set_exception(waiting.outcome, exc)
        except BaseException:
            for waiting in group:
                waiting.outcome.cancel()
            raise
        finally:
            self._batches_in_flight -= 1
            self._start_groups()
        if self._after_group is not None and succeeded:
            try:
                await self._after_group(succeeded)
            except Exception as exc:
                log.warning("after-group step failed", error=repr(exc))


@dataclass(eq=False, slots=True)
class _Job(Generic[W]):
    ctx: JobContext
    item: W
    # The span of the job's attempt (TRACING_ENABLED), linked from the shared transaction's span.
    trace: object | None = None


class SharedTransactions(Generic[W, R]):
    """Runs the work of concurrently running handlers of one worker in shared fenced transactions.

    A handler calls `await shared.run(ctx, item)` instead of opening `ctx.transaction()`; it gets its
    own result, or raises its own exception (`LeaseLostError` when its lease was gone). The grouping
    is a `GroupRunner`'s."""

    def __init__(
        self,
        pool: Pool,
        work: BatchWork[W, R],
        *,
        batch_max: int,
        batches_in_flight_max: int,
        after_commit: AfterCommit[R] | None = None,
    ) -> None:
        self._pool = pool
        self._work = work
        self._groups: GroupRunner[_Job[W], R] = GroupRunner(
            self._group, batch_max=batch_max, batches_in_flight_max=batches_in_flight_max,
            after_group=after_commit,
        )  # fmt: skip

    async def run(self, ctx: JobContext, item: W) -> R:
        """Do `item` for job `ctx` in a shared transaction that completes the job; its result."""
        if ctx.lease_lost.is_set():
            raise LeaseLostError(ctx.id)
        return await self._groups.submit(_Job(ctx, item, current_span_context()))

    async def _group(self, group: list[_Job[W]]) -> list[R | Exception]:
        try:
            return await self._transaction(group)
        except Exception:
            for job in group:
                job.ctx.completed_in_transaction = False  # nothing of the group committed
            raise

    async def _transaction(self, group: list[_Job[W]]) -> list[R | Exception]:
        """One shared transaction for `group`; retried from the start after a deadlock. Traced as a
        child of the first job's span (the task that started the group) linked to every job's."""
        if not tracing_enabled():
            return await self._transaction_attempts(group)
        with trace_span("jobs.shared_transaction", {"jobs": len(group)}, linked=[j.trace for j in group]):
            return await self._transaction_attempts(group)

    async def _transaction_attempts(self, group: list[_Job[W]]) -> list[R | Exception]:
        for attempt in range(1, ATTEMPTS_MAX + 1):
            try:
                return await self._attempt(group)
            except asyncpg.DeadlockDetectedError:
                for job in group:
                    job.ctx.completed_in_transaction = False  # rolled back
                if attempt == ATTEMPTS_MAX:
                    raise
                log.info("shared transaction deadlocked; retrying", jobs=len(group), attempt=attempt)
        raise AssertionError("unreachable")

    async def _attempt(self, group: list[_Job[W]]) -> list[R | Exception]:
        outcomes: dict[int, R | Exception] = {}  # by the job's identity, not its id
        async with self._pool.acquire() as conn, conn.transaction():
            held = await hold_leases(conn, [job.ctx for job in group])
            held_ids = {id(ctx) for ctx in held}
            todo = [job for job in group if id(job.ctx) in held_ids]
            results = await self._work(conn, [(job.ctx, job.item) for job in todo])
            assert len(results) == len(todo), "the work returns one outcome per job"
            succeeded = []
            for job, result in zip(todo, results, strict=True):
                outcomes[id(job)] = result
                if not isinstance(result, Exception):
                    succeeded.append(job.ctx)
            await complete_all_in(conn, succeeded)
        return [outcomes.get(id(job), LeaseLostError(job.ctx.id)) for job in group]


def _set_exception(outcome: asyncio.Future[Any], exc: BaseException) -> None:
    if not outcome.done():
        outcome.set_exception(exc)
