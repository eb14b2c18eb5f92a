"""The worker's executor: runs a claimed job's handler and turns what it did into an outcome.

A handler's exception never crashes the worker: it becomes a failure (retry with backoff, dead,
cancelled), a snooze, a RateLimitedError's give-back, or a lease lost. Timeouts are enforced by one
watchdog for all jobs; sync handlers run in a thread pool.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

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
from paymanager.jobs.registry import HandlerSpec, Registry
from paymanager.jobs.states import JobState
from paymanager.logging import get_logger
from paymanager.tracing import job_span, without_trace

log = get_logger("paymanager.jobs.executor")

# How often handler timeouts are checked: one timer for all jobs instead of one per job, so a timeout
# fires up to this late.
WATCHDOG_INTERVAL_S = 0.1


class JobExecutor:
    def __init__(
        self,
        registry: Registry,
        options: WorkerOptions,
        leases: Leases,
        completer: Completer,
        limited: LimitedQueues,
        *,
        settle: Callable[[JobContext, Completion | Failure], None],
        forget: Callable[[list[JobContext]], None],
        stopping: Callable[[], bool],
    ) -> None:
        self._registry = registry
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

    def start(self, ctx: JobContext, held: Held, backoff: JsonObject | None) -> None:
        held.task = asyncio.create_task(self.run(ctx, held, backoff))

    async def run(self, ctx: JobContext, held: Held, backoff: JsonObject | None) -> None:
        spec = self._registry.get(ctx.kind)
        started = time.perf_counter()
        try:
            try:
                try:
                    with job_span(ctx.kind, ctx.id, ctx.queue, ctx.attempt, ctx.payload):
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
                # something it awaited (a future or a task cancelled elsewhere). Left to end the
                # task, it would leave the job held, its lease extended by every heartbeat.
                raise RuntimeError("the handler raised CancelledError; its job was not cancelled") from None
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
                backoff=chosen or self._options.default_backoff, cancel_requested=ctx.cancelled.is_set(),
            )  # fmt: skip
            self._settle(ctx, failure)
        else:
            if ctx.completed_in_transaction:
                self._completer.published_completion(ctx)
                self._forget([ctx])
            else:
                result = value if value is not None else ctx.result
                self._settle(ctx, Completion(ctx.id, ctx.lease_token, result))

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

    def shutdown(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)
