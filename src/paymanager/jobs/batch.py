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


@dataclass(eq=False)
class _Request(Generic[W, R]):
    ctx: JobContext
    item: W
    outcome: asyncio.Future[R]
    # The span of the job's attempt (TRACING_ENABLED), linked from the shared transaction's span.
    trace: object | None = None


class SharedTransactions(Generic[W, R]):
    """Runs the work of concurrently running handlers of one worker in shared fenced transactions.

    A handler calls `await shared.run(ctx, item)` instead of opening `ctx.transaction()`; it gets its
    own result, or raises its own exception (`LeaseLostError` when its lease was gone)."""

    def __init__(
        self,
        pool: Pool,
        work: BatchWork[W, R],
        *,
        batch_max: int,
        batches_in_flight_max: int,
        after_commit: AfterCommit[R] | None = None,
    ) -> None:
        assert 1 <= batch_max <= BATCH_MAX_LIMIT, batch_max
        assert 1 <= batches_in_flight_max <= BATCHES_IN_FLIGHT_LIMIT, batches_in_flight_max
        self._pool = pool
        self._work = work
        self._after_commit = after_commit
        self._batch_max = batch_max
        self._batches_in_flight_max = batches_in_flight_max
        self._batches_in_flight = 0
        self._waiting: deque[_Request[W, R]] = deque()
        self._tasks: set[asyncio.Task[None]] = set()

    async def run(self, ctx: JobContext, item: W) -> R:
        """Do `item` for job `ctx` in a shared transaction that completes the job; its result."""
        if ctx.lease_lost.is_set():
            raise LeaseLostError(ctx.id)
        request: _Request[W, R] = _Request(
            ctx, item, asyncio.get_running_loop().create_future(), current_span_context()
        )
        self._waiting.append(request)
        # Start on the next turn of the loop, so that the handlers the worker started together (one
        # claim) join one group rather than the first of them running alone.
        asyncio.get_running_loop().call_soon(self._start_batches)
        return await request.outcome

    def _start_batches(self) -> None:
        while self._waiting and self._batches_in_flight < self._batches_in_flight_max:
            group: list[_Request[W, R]] = []
            while self._waiting and len(group) < self._batch_max:
                request = self._waiting.popleft()
                if not request.outcome.done():  # a caller cancelled while waiting is dropped
                    group.append(request)
            if not group:
                return
            self._batches_in_flight += 1
            task = asyncio.create_task(self._run_group(group))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run_group(self, group: list[_Request[W, R]]) -> None:
        committed: list[R] = []
        try:
            outcomes = await self._transaction(group)
            for request, outcome in zip(group, outcomes, strict=True):
                if isinstance(outcome, Exception):
                    _set_exception(request, outcome)
                else:
                    committed.append(outcome)
                    if not request.outcome.done():
                        request.outcome.set_result(outcome)
        except Exception as exc:
            for request in group:
                request.ctx.completed_in_transaction = False  # nothing of the group committed
                _set_exception(request, exc)
        except BaseException:
            for request in group:
                request.outcome.cancel()
            raise
        finally:
            self._batches_in_flight -= 1
            self._start_batches()
        if self._after_commit is not None and committed:
            try:
                await self._after_commit(committed)
            except Exception as exc:
                log.warning("after-commit step of a shared transaction failed", error=repr(exc))

    async def _transaction(self, group: list[_Request[W, R]]) -> list[R | Exception]:
        """One shared transaction for `group`; retried from the start after a deadlock. Traced as a
        child of the first job's span (the task that started the group) linked to every job's."""
        if not tracing_enabled():
            return await self._transaction_attempts(group)
        with trace_span("jobs.shared_transaction", {"jobs": len(group)}, linked=[r.trace for r in group]):
            return await self._transaction_attempts(group)

    async def _transaction_attempts(self, group: list[_Request[W, R]]) -> list[R | Exception]:
        for attempt in range(1, ATTEMPTS_MAX + 1):
            try:
                return await self._attempt(group)
            except asyncpg.DeadlockDetectedError:
                for request in group:
                    request.ctx.completed_in_transaction = False  # rolled back
                if attempt == ATTEMPTS_MAX:
                    raise
                log.info("shared transaction deadlocked; retrying", jobs=len(group), attempt=attempt)
        raise AssertionError("unreachable")

    async def _attempt(self, group: list[_Request[W, R]]) -> list[R | Exception]:
        outcomes: dict[int, R | Exception] = {}  # by request identity, not job id
        async with self._pool.acquire() as conn, conn.transaction():
            held = await hold_leases(conn, [request.ctx for request in group])
            held_ids = {id(ctx) for ctx in held}
            todo = [request for request in group if id(request.ctx) in held_ids]
            results = await self._work(conn, [(request.ctx, request.item) for request in todo])
            assert len(results) == len(todo), "the work returns one outcome per job"
            succeeded = []
            for request, result in zip(todo, results, strict=True):
                outcomes[id(request)] = result
                if not isinstance(result, Exception):
                    succeeded.append(request.ctx)
            await complete_all_in(conn, succeeded)
        return [outcomes.get(id(request), LeaseLostError(request.ctx.id)) for request in group]


def _set_exception(request: _Request[Any, Any], exc: BaseException) -> None:
    if not request.outcome.done():
        request.outcome.set_exception(exc)
