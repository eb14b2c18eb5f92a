"""The worker's executor: runs a claimed job's handler and turns what it did into an outcome.

A handler's exception never crashes the worker: it becomes a failure (retry with backoff, dead,
cancelled), a snooze, a RateLimitedError's give-back, or a lease lost. Timeouts are enforced by one
watchdog for all jobs; sync handlers run in a thread pool.

Jobs run on runners: long-lived tasks that take started jobs from one queue in turn, each job in a
fresh copy of the runner's context (what a handler sets in a contextvar stays with its job). A job
costs no task of its own: a runner that finishes a job without waiting takes the next at once, and a
runner is woken for the queue only when none is on its way, so a batch of quick jobs runs in one
step of one task while a batch of waiting ones spreads over as many runners as it needs, one loop
turn apart. A job's `Held.task` is its runner while it runs; cancelling that task (a timeout, a stop
past its timeout) cancels the job, and the runner goes on with the next.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
import types
from collections import deque
from collections.abc import Callable, Coroutine, Generator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from paymanager.jobs import metrics
from paymanager.jobs._completer import Completer
from paymanager.jobs._leases import Held, Leases
from paymanager.jobs._limits import LimitedQueues
from paymanager.jobs._outcomes import Completion, Failure, decide_failure, snooze
from paymanager.jobs._store import JsonObject
from paymanager.jobs.backoff import backoff_from_json
from paymanager.jobs.context import JobContext, SnoozeRequest
from paymanager.jobs.errors import LeaseLostError, PermanentError, RateLimitedError
from paymanager.jobs.options import WorkerOptions
from paymanager.jobs.registry import HandlerSpec
from paymanager.jobs.states import JobState
from paymanager.logging import get_logger
from paymanager.tracing import enabled as tracing_enabled
from paymanager.tracing import job_span, without_trace

log = get_logger("paymanager.jobs.executor")

# A claimed job, held but not started: its context, its hold and its backoff (as stored).
Ready = tuple[JobContext, Held, JsonObject | None]

# How often handler timeouts are checked: one timer for all jobs instead of one per job, so a timeout
# fires up to this late.
WATCHDOG_INTERVAL_S = 0.1


class JobExecutor:
    def __init__(
        self,
        options: WorkerOptions,
        leases: Leases,
        completer: Completer,
        limited: LimitedQueues,
        *,
        settle: Callable[[JobContext, Completion | Failure], None],
        forget: Callable[[list[JobContext]], None],
        stopping: Callable[[], bool],
    ) -> None:
        self._options = options
        self._leases = leases
        self._completer = completer
        self._limited = limited
        # Hands an outcome to the completer and frees the job's slot.
        self._settle = settle
        # The attempt ended without an outcome to write (its lease lost, or completed in its tx).
        self._forget = forget
        self._stopping = stopping
        self._threads = ThreadPoolExecutor(options.sync_threads, thread_name_prefix="job-sync")
        # Started jobs no runner has taken yet, the idle runners' wake-up futures, the runners woken
        # (or made) that have not taken a job yet, and every runner.
        self._ready: deque[Ready] = deque()
        self._idle: list[asyncio.Future[None]] = []
        self._waking = 0
        self._runners: set[asyncio.Task[None]] = set()
        # Jobs inside `run` (on a runner, or in a claim's own task); `_ended` is set while none is
        # and none is waiting for a runner.
        self._running = 0
        self._ended = asyncio.Event()
        self._ended.set()
        self._closing = False

    def start(self, jobs: Sequence[Ready]) -> None:
        """Run the jobs on runners (each starts within a loop turn or two; `Held.task` is set then)."""
        if not jobs:
            return
        self._ready.extend(jobs)
        self._ended.clear()
        if not self._waking:
            self._wake_runner()

    def _wake_runner(self) -> None:
        self._waking += 1
        if self._idle:
            self._idle.pop().set_result(None)
            return
        runner = asyncio.get_running_loop().create_task(self._runner(), name="job-runner")
        self._runners.add(runner)
        runner.add_done_callback(self._runner_ended)

    @types.coroutine
    def _runner(self) -> Generator[Any, Any, None]:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        while not self._closing:
            self._waking -= 1
            while self._ready and not self._closing:
                ctx, held, backoff = self._ready.popleft()
                if self._ready and not self._waking:
                    # The rest of the queue must not wait for this job if it awaits something.
                    self._wake_runner()
                held.task = task
                try:
                    coro, context = self.run(ctx, held, backoff), contextvars.copy_context()
                    try:
                        # Its first step here: most jobs end in it, and need no more than this.
                        yielded = context.run(coro.send, None)
                    except StopIteration:
                        pass
                    else:
                        yield from _in_context(coro, context, yielded)
                finally:
                    held.task = None
                    # A cancel aimed at that job (its timeout, a stop) is spent: the runner is not.
                    while task.cancelling() and not self._closing:
                        task.uncancel()
            waiter = loop.create_future()
            self._idle.append(waiter)
            yield from waiter

    def _runner_ended(self, runner: asyncio.Task[None]) -> None:
        self._runners.discard(runner)
        if not runner.cancelled() and runner.exception() is not None:
            log.error("job runner crashed", error=repr(runner.exception()))
        if self._ready and not self._waking and not self._closing:
            self._wake_runner()

    async def wait_ended(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` until no job runs or waits for a runner; True when none does."""
        try:
            async with asyncio.timeout(max(0.0, timeout_s)):
                await self._ended.wait()
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        """End the runners (a job still on one is cancelled) and the thread pool."""
        self._closing = True
        for waiter in self._idle:
            waiter.cancel()
        for runner in self._runners:
            runner.cancel()
        await asyncio.gather(*self._runners, return_exceptions=True)
        self._threads.shutdown(wait=False, cancel_futures=True)

    async def run(self, ctx: JobContext, held: Held, backoff: JsonObject | None) -> None:
        # One coroutine per job, the accounting around the attempt inline: every coroutine and frame
        # made here is made once per job on the worker's busiest path.
        if not self._running:
            # Set only while no job runs or waits: with one running, it is clear already.
            self._ended.clear()
        self._running += 1
        try:
            spec = held.spec
            started = time.perf_counter()
            try:
                try:
                    try:
                        if tracing_enabled():
                            with job_span(ctx.kind, ctx.id, ctx.queue, ctx.attempt, ctx.payload):
                                value = await self._call(ctx, spec)
                        elif spec is not None and spec.is_plain_async:
                            value = await spec.handler(ctx)
                        else:
                            value = await self._call(ctx, spec)
                    finally:
                        metrics.RUN_SECONDS.observe(ctx.queue, time.perf_counter() - started)
                except asyncio.CancelledError:
                    if held.timed_out:
                        raise TimeoutError(f"job {ctx.id} ran past its timeout") from None
                    task = asyncio.current_task()
                    if self._stopping() or (task is not None and task.cancelling()):
                        raise
                    # Not a cancel of this job's task: the handler let out the CancelledError of
                    # something it awaited (a future or a task cancelled elsewhere). Left to end
                    # the task, it would leave the job held, its lease extended by every heartbeat.
                    message = "the handler raised CancelledError; its job was not cancelled"
                    raise RuntimeError(message) from None
            except SnoozeRequest as request:
                self._settle(ctx, snooze(ctx.id, ctx.lease_token, request.delay_ms))
            except RateLimitedError as exc:
                log.info("job rate limited", job_id=ctx.id, queue=ctx.queue, pause_ms=exc.retry_after_ms)
                # The pause is written before the job goes back, so no process claims it meanwhile.
                await self._limited.pause(ctx.queue, exc.retry_after_ms)
                # Available again, the attempt not spent, its place in the queue (run_at) kept.
                self._settle(ctx, Failure(ctx.id, ctx.lease_token, JobState.AVAILABLE, None, None, False))
            except LeaseLostError:
                log.warning("job lease lost; its effects were not committed", job_id=ctx.id, kind=ctx.kind)
                self._forget([ctx])
            except asyncio.CancelledError:
                # Shutdown past its timeout: `stop` gives the lease back; nothing is written here.
                if not self._stopping():
                    raise
            except Exception as exc:  # a handler's exception never crashes the worker
                chosen = backoff_from_json(backoff) if backoff else (spec.backoff if spec else None)
                failure = decide_failure(
                    ctx.id, ctx.lease_token, exc, attempt=ctx.attempt, max_attempts=ctx.max_attempts,
                    backoff=chosen or self._options.default_backoff, cancel_requested=ctx.cancel_requested,
                )  # fmt: skip
                self._settle(ctx, failure)
            else:
                if ctx.completed_in_transaction:
                    self._completer.published_completion(ctx)
                    self._forget([ctx])
                else:
                    result = value if value is not None else ctx.result
                    self._settle(ctx, Completion(ctx.id, ctx.lease_token, result))
        finally:
            self._running -= 1
            if not self._running and not self._ready:
                self._ended.set()

    async def _call(self, ctx: JobContext, spec: HandlerSpec | None) -> object:
        if spec is None:
            raise PermanentError(f"no handler is registered for job kind {ctx.kind!r}")
        if spec.payload_model is not None or spec.result_model is not None:
            return await self._call_typed(ctx, spec)
        if spec.is_async:
            return await spec.handler(ctx)
        loop = asyncio.get_running_loop()
        # A thread cannot be interrupted: on timeout the job fails, but the thread runs to its end.
        return await loop.run_in_executor(self._threads, spec.handler, ctx)

    async def _call_typed(self, ctx: JobContext, spec: HandlerSpec) -> object:
        args: tuple[object, ...] = (
            (ctx,) if spec.payload_model is None else (spec.model_of(without_trace(ctx.payload)), ctx)
        )
        if spec.is_async:
            value = await spec.handler(*args)
        else:
            value = await asyncio.get_running_loop().run_in_executor(self._threads, spec.handler, *args)
        return spec.result_of(value if value is not None else ctx.result)

    async def run_watchdog(self) -> None:
        while True:
            await asyncio.sleep(WATCHDOG_INTERVAL_S)
            now = time.monotonic()
            for held in list(self._leases.held.values()):
                if held.task is not None and not held.timed_out and now > held.deadline:
                    held.timed_out = True
                    held.task.cancel()


@types.coroutine
def _in_context(
    coro: Coroutine[Any, Any, None], context: contextvars.Context, yielded: Any
) -> Generator[Any, Any, None]:
    """Go on awaiting `coro`, whose first step (run in `context`) yielded `yielded`, with each of its
    next steps run in `context`: what `yield from coro` does, but in a context of the job's own, as
    a task of its own would run it. What the coroutine yields (a future it waits on) goes to the
    runner's task; what the task sends or throws back goes to `coro`."""
    while True:
        try:
            value, error = (yield yielded), None
        except BaseException as exc:  # relayed into the coroutine, as a task would
            value, error = None, exc
        try:
            yielded = context.run(coro.send, value) if error is None else context.run(coro.throw, error)
        except StopIteration:
            return
