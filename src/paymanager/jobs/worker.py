"""The worker: one asyncio loop per process serving several queues, each with its own concurrency.

Split by duty: this module is the producer (the fetch loop and the claims, and the slots they
fill); `_executor.py` runs a claimed job (timeouts, cancellation, what its handler's end means);
`_leases.py` holds the attempts (heartbeats, the release at a stop); `_completer.py` writes the
outcomes in batches; `_limits.py` knows which queues have cluster-wide limits. The Worker wires them.

The fetch loop claims, in ONE statement, as many jobs as there are free slots over all queues that
may have work (a NOTIFY or a poll says so); each job runs in its own task (an idle worker's claim
runs its first job in the claim's task); a heartbeat extends every held lease in one statement.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time

import asyncpg

from paymanager.db.database import Database, over_pool
from paymanager.db.pool import Pool
from paymanager.jobs import metrics
from paymanager.jobs._completer import Completer
from paymanager.jobs._executor import JobExecutor, Ready
from paymanager.jobs._leases import Held, Leases
from paymanager.jobs._limits import LimitedQueues
from paymanager.jobs._listener import Listener
from paymanager.jobs._outcomes import Completion, Failure
from paymanager.jobs._pinned import PinnedConnection
from paymanager.jobs._queries import CHANNEL_AVAILABLE, CHANNEL_CANCEL, CHANNEL_QUEUE
from paymanager.jobs._store import (
    Claimed,
    ClaimParams,
    Job,
    claim,
    decodes_json,
    promote_due,
)
from paymanager.jobs.context import JobContext
from paymanager.jobs.errors import CodecError
from paymanager.jobs.events import DeadHook, ErrorHook, EventPublisher, JobEvent, report_error
from paymanager.jobs.options import CONCURRENCY_MAX, WorkerOptions
from paymanager.jobs.registry import Registry
from paymanager.logging import get_logger

log = get_logger("paymanager.jobs.worker")

# While this many outcomes wait to be written, the worker claims no more (back-pressure).
PENDING_OUTCOMES_MAX = 5_000
CLAIM_RETRY_DELAY_S = 0.5
# A claim that failed on these has waited already (its lock_timeout, or the deadlock detector's
# timeout): it goes again at once. Two claims in flight can deadlock on each other's jobs (jobs.sql,
# job_claim_batch); the database is not failing then, and a pause would only stall the claims.
LOCK_ERRORS = (asyncpg.LockNotAvailableError, asyncpg.DeadlockDetectedError)
DB_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError)


class Worker:
    """Runs registered handlers for jobs of `queues` (queue -> concurrency). A runtime Service."""

    name = "job-worker"

    def __init__(
        self,
        pool: Pool,
        database: Database | str,
        registry: Registry,
        queues: dict[str, int],
        options: WorkerOptions | None = None,
        *,
        on_dead: DeadHook | None = None,
        on_error: ErrorHook | None = None,
    ) -> None:
        """`on_dead` runs for each job that dies; `on_error(where, exc)` hears each error of the
        worker's own (a claim, an outcome write, a heartbeat failed), its `error` event."""
        if not queues:
            raise ValueError("a worker needs at least one queue")
        for queue, concurrency in queues.items():
            if not 1 <= concurrency <= CONCURRENCY_MAX:
                raise ValueError(f"concurrency of queue {queue!r} must be within [1, {CONCURRENCY_MAX}]")
        self._pool = pool
        self._registry = registry
        self._options = options or WorkerOptions()
        # The claim pipeline and the completer each pin a pooled connection for the worker's life;
        # heartbeats, progress and handlers' transactions need at least one more.
        pinned = self._options.claim_pipeline + 1
        if pool.get_max_size() < pinned + 1:
            raise ValueError(
                f"the pool's max_size ({pool.get_max_size()}) must be at least {pinned + 1}: the worker pins "
                f"{pinned} connections (claim_pipeline={self._options.claim_pipeline}, and the completer)"
            )
        self._limits = dict(queues)
        self._free = dict(queues)
        self._on_error = on_error
        # Bound once: every claimed job's context takes it.
        self._progress = self._on_progress
        # `active` events waiting for their one publish per loop turn (WorkerOptions.active_events).
        self._active: list[JobEvent] = []
        self._publishing: set[asyncio.Task[None]] = set()
        # Queues with cluster-wide limits are claimed within them: by the plain claims' statement
        # while those go out (`_reserve_limited`), else by a claim of their own
        # (`_launch_limited_claims`); `plain` is the rest, the queues the plain claims serve.
        self._limited = LimitedQueues(pool, list(queues), self._limits_changed)
        self._limited_claims: dict[str, asyncio.Task[None]] = {}
        # Limited queues in a plain claim in flight: one claim of a queue at a time.
        self._riding: set[str] = set()
        self._maybe_work = dict.fromkeys(queues, True)
        self._notified = dict.fromkeys(queues, 0)
        self._wake = asyncio.Event()
        self._stopping = False
        self._last_claim_at = -1e9  # monotonic seconds at the start of the last claim (cooldown)
        self._cooldown_timer: asyncio.TimerHandle | None = None
        self._last_claim_filled = False
        self._tasks: list[asyncio.Task[None]] = []
        self.events = EventPublisher(
            pool, self._options.redis_url, notify_completed=self._options.notify_completed_events
        )
        lock_timeout_ms = self._options.claim_lock_timeout_ms
        self._idle_conns = [
            PinnedConnection(pool, generic_plans=True, lock_timeout_ms=lock_timeout_ms)
            for _ in range(self._options.claim_pipeline)
        ]
        self._all_conns = list(self._idle_conns)
        self._claims: set[asyncio.Task[None]] = set()
        self._completer = Completer(
            PinnedConnection(pool, generic_plans=True),
            self._options.complete_batch_max,
            self.events,
            self._forget,
            self._requeued,
            on_dead,
            self._options.delete_completed,
        )
        self._leases = Leases(
            pool, lease_ms=self._options.lease_ms, outcome_pending=self._completer.is_pending
        )
        self._completer.on_error = self._leases.on_error = on_error
        # The attempts held (Leases.held), read and changed by every duty of the worker.
        self._held = self._leases.held
        self._executor = JobExecutor(
            self._options,
            self._leases,
            self._completer,
            self._limited,
            settle=self._settle,
            forget=self._forget,
            stopping=lambda: self._stopping,
        )
        self._listener = Listener(
            over_pool(pool, database),
            {
                CHANNEL_AVAILABLE: self._on_available,
                CHANNEL_CANCEL: self._on_cancel,
                CHANNEL_QUEUE: self._on_queue_settings,
            },
            self._on_reconnect,
            self._options.listener_check_interval_ms / 1000,
            lock_timeout_ms=lock_timeout_ms,
        )

    @property
    def listener(self) -> Listener:
        return self._listener

    @property
    def limited_queues(self) -> LimitedQueues:
        return self._limited

    @property
    def running_count(self) -> int:
        return len(self._held)

    async def start(self) -> None:
        if not await decodes_json(self._pool):
            # Handlers would get strings, and every outcome's write would fail (retried for ever).
            raise CodecError("the worker's pool decodes jsonb as text")
        _raise_young_threshold(self._options.gc_young_threshold)
        await self.events.start()
        await self._listener.start()
        await self._limited.load()
        self._tasks = [
            asyncio.create_task(self._fetch_loop(), name="job-fetch"),
            asyncio.create_task(
                self._leases.run_heartbeats(self._options.heartbeat_interval_ms / 1000), name="job-heartbeat"
            ),
            asyncio.create_task(self._completer.run(), name="job-completer"),
            asyncio.create_task(self._executor.run_watchdog(), name="job-watchdog"),
        ]
        log.info("job worker started", queues=self._limits, owner=self._options.owner)

    def stop_taking_work(self) -> None:
        """Claim nothing more (the first step of a process's shutdown; `stop` does the rest)."""
        self._stopping = True
        self._wake.set()

    async def stop(self, timeout_s: float) -> None:
        """Stop claiming; let running jobs finish within `timeout_s`; give the rest back at once."""
        self.stop_taking_work()
        if self._cooldown_timer is not None:
            self._cooldown_timer.cancel()
            self._cooldown_timer = None
        deadline = time.monotonic() + max(0.0, timeout_s)
        fetch = self._tasks[0] if self._tasks else None
        if fetch is not None:
            # The fetch loop ends once its claims in flight came back (a claim waits on a lock at
            # most the claim sessions' lock_timeout): their jobs are held and started.
            await asyncio.gather(fetch, return_exceptions=True)
        unfinished = 0
        if not await self._executor.wait_ended(deadline - time.monotonic()):
            # Cancelling a job's task (its runner, or its claim's task) cancels the job only.
            for held in list(self._held.values()):
                if held.task is not None:
                    held.task.cancel()
                    unfinished += 1
            await self._executor.wait_ended(1)
        await self._completer.drain()
        # The heartbeat stops before the release: its UPDATE of a held row would make the release
        # (which skips locked rows) leave that job running under a lease just extended.
        heartbeat = self._tasks[1] if len(self._tasks) > 1 else None
        if heartbeat is not None:
            heartbeat.cancel()
            await asyncio.gather(heartbeat, return_exceptions=True)
        # What is still held now has no outcome to write (drain wrote them all): the jobs cut off
        # above, and any whose task ended without one. Give every one back.
        await self._leases.release([h.ctx for h in self._held.values()])
        for task in self._tasks[1:]:
            task.cancel()
        await asyncio.gather(*self._tasks[1:], return_exceptions=True)
        for conn in self._all_conns:
            await conn.close()
        await self._completer.close()
        await self._limited.close()
        await self._listener.stop()
        await self.events.close()
        await self._executor.close()
        log.info("job worker stopped", released=unfinished)

    # --- notifications -----------------------------------------------------------------------------

    def _on_available(self, queue: str) -> None:
        if queue in self._limits:
            self._maybe_work[queue] = True
            self._notified[queue] += 1
            # Claim from the notification itself: waking the fetch loop first costs event-loop turns
            # on the enqueue-to-start path (an idle worker's latency). An idle worker claims on the
            # LISTEN connection, whose backend has just woken to deliver this notification. The fetch
            # loop is woken only when no claim went out: the claim's end wakes it anyway.
            if not self._launch_claim(on_listener=True):
                self._wake.set()

    def _on_cancel(self, payload: str) -> None:
        with contextlib.suppress(ValueError):
            self._leases.on_cancel(int(payload))

    def _on_reconnect(self) -> None:
        # Notifications sent while the listener was down are lost: look at every queue once.
        for queue in self._limits:
            self._maybe_work[queue] = True
        self._limited.request_load()
        self._wake.set()

    def _on_queue_settings(self, queue: str) -> None:
        if queue in self._limits:
            self._limited.request_load()

    def _limits_changed(self, queue: str) -> None:
        """`queue` moved between the plain and the limited claims, or its block ended: look at it."""
        self._maybe_work[queue] = True
        self._notified[queue] += 1
        self._wake.set()

    # --- claiming ----------------------------------------------------------------------------------

    async def _fetch_loop(self) -> None:
        """Launch claims while slots are free and queues may have work; up to `claim_pipeline`
        claims are in flight at once, each on its own connection, so the database works on one
        batch while this process runs the previous one."""
        poll_s = self._options.poll_interval_ms / 1000
        next_poll = time.monotonic() + poll_s
        while not self._stopping:
            if time.monotonic() >= next_poll:
                await self._poll_tick()
                next_poll = time.monotonic() + poll_s
            self._wake.clear()
            launched = self._launch_claim()
            if self._limited.limits:
                self._launch_limited_claims()
            if launched:
                continue
            # asyncio.timeout, not wait_for: wait_for wraps the wait in a new task on every wake-up
            # (Python 3.11), and the fetch loop wakes for every job that ends.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, next_poll - time.monotonic())):
                    await self._wake.wait()
        if self._claims or self._limited_claims:
            await asyncio.gather(*self._claims, *self._limited_claims.values(), return_exceptions=True)

    async def _poll_tick(self) -> None:
        """The fallback: promote due jobs and look at every queue, as if notified."""
        for queue in self._limits:
            self._maybe_work[queue] = True
        try:
            await promote_due(self._pool, now=None, batch_max=self._options.promote_batch_max)
        except DB_ERRORS as exc:
            log.warning("promoting due jobs failed", error=str(exc))
            report_error(self._on_error, "promote", exc)
        if not self._limited.limits:
            # A limit set later reaches this worker by its NOTIFY (and a reconnect's load).
            return
        try:
            # A pause asked by a handler may have ended: its queue goes back to the plain claims.
            await self._limited.load()
        except DB_ERRORS as exc:
            log.warning("loading queue limits failed", error=str(exc))

    def _launch_claim(self, *, on_listener: bool = False) -> bool:
        """Start one claim if a connection is idle and a claim is worth a round trip (and, with a
        cooldown, the last claim started long enough ago: else a timer launches it then).

        `on_listener`: the claim may run on the LISTEN connection, if no other claim is in flight and
        nothing runs on it (see `_listener.py`)."""
        if self._stopping or not self._should_claim():
            return False
        listener = on_listener and not self._claims and self._listener.can_fetch()
        if not (listener or self._idle_conns) or self._cooling_down():
            return False
        queues, wanted = self._reserve()
        limited, limited_wanted = self._reserve_limited() if self._limited.limits else ([], [])
        conn: PinnedConnection | Listener = self._listener if listener else self._idle_conns.pop()
        task = asyncio.create_task(self._claim(conn, queues, wanted, limited, limited_wanted))
        self._claims.add(task)
        task.add_done_callback(self._claim_done)
        return True

    def _cooling_down(self) -> bool:
        """True while the cooldown since the last claim's start runs; a timer then launches the
        claim and wakes the fetch loop. Records this claim's start when it may go. No cooldown after
        a claim that filled its slots: a backlog drains at full speed, a trickle is gathered."""
        cooldown_s = self._options.claim_cooldown_ms / 1000
        now = time.monotonic()
        if cooldown_s <= 0 or self._last_claim_filled:
            self._last_claim_at = now
            return False
        remaining = self._last_claim_at + cooldown_s - now
        if remaining > 0:
            if self._cooldown_timer is None:
                self._cooldown_timer = asyncio.get_running_loop().call_later(remaining, self._cooldown_over)
            return True
        self._last_claim_at = now
        return False

    def _cooldown_over(self) -> None:
        self._cooldown_timer = None
        self._launch_claim()
        self._wake.set()

    def _claim_done(self, task: asyncio.Task[None]) -> None:
        self._claims.discard(task)
        self._wake.set()
        if not task.cancelled() and task.exception() is not None:
            log.error("job claim crashed", error=repr(task.exception()))

    def _should_claim(self) -> bool:
        """A claim is worth a round trip when a queue with work has free slots: any number when no
        claim is in flight (latency), else as many, the queues with work taken together, as a full
        claim of the largest of them (batch size: its share, concurrency / pipeline, within
        claim_batch_max). A small queue's free slot beside a busy queue waits for that queue's next
        claim, or for none in flight: a claim of its own beside the claims in flight would cost a
        statement and a commit for one job. A share over claim_batch_max leaves room for a claim
        more than the pipeline holds: a full one goes out as soon as it fits, so the database works
        on the pipeline's claims while this process runs the jobs of one more, as a bare claim loop
        keeps it busy.
        A second claim goes out beside one in flight only once a claim came back full (a backlog):
        an idle worker woken by one NOTIFY sent two claims for its one job, and the second one's
        backend took a core from the first on the enqueue-to-start path."""
        if self._completer.pending > PENDING_OUTCOMES_MAX:
            return False
        in_flight = len(self._claims)
        if in_flight and not self._last_claim_filled:
            return False
        free = largest = 0
        for q in self._limited.plain:
            if self._maybe_work[q]:
                if self._free[q] > 0 and not in_flight:
                    return True
                free += self._free[q]
                largest = max(largest, self._limits[q])
        full = min(-(-largest // self._options.claim_pipeline), self._options.claim_batch_max)
        return free > 0 and free >= full

    def _reserve(self) -> tuple[list[str], list[int]]:
        """Take the free slots of the queues that may have work for one claim."""
        queues: list[str] = []
        wanted: list[int] = []
        budget = self._options.claim_batch_max
        pipeline = self._options.claim_pipeline
        for queue in self._limited.plain:
            # A share of the queue's slots per claim, so the next claim can be in flight meanwhile.
            share = -(-self._limits[queue] // pipeline)
            n = min(self._free[queue], share, budget)
            if n > 0 and self._maybe_work[queue]:
                queues.append(queue)
                wanted.append(n)
                self._free[queue] -= n
                budget -= n
        return queues, wanted

    def _limited_ready(self) -> list[str]:
        """The limited queues a claim may go out for: work maybe, free slots, not blocked, no claim
        of theirs in flight (their claims are serialised in the database anyway), and not a global
        concurrency this process fills alone."""
        return [
            queue
            for queue in self._limited.limits
            if queue not in self._limited_claims
            and queue not in self._riding
            and self._free[queue] > 0
            and self._maybe_work[queue]
            and not self._limited.is_blocked(queue)
            and not self._fills_global_concurrency(queue)
        ]

    def _fills_global_concurrency(self, queue: str) -> bool:
        """This process holds as many jobs of `queue` as its global concurrency allows: no process
        can start one, so a claim would read the queue's row and count its running jobs for nothing
        (a NOTIFY of an enqueue, or of a slot freed and already taken, wakes the queue meanwhile).
        A job counts until its outcome is handed on: the claim that writes it frees its slot first.
        A job whose lease was lost and rescued still counts while its handler runs: it still calls
        the partner whose concurrency the limit protects."""
        cap = self._limited.limits[queue].concurrency_max
        return cap is not None and self._limits[queue] - self._free[queue] >= cap

    def _reserve_limited(self) -> tuple[list[str], list[int]]:
        """Take the free slots of the limited queues ready for a claim, for the plain claim going
        out: its statement claims them too, within their limits (job_claim_batch_limited)."""
        queues = self._limited_ready()
        wanted = [min(self._free[q], self._options.claim_batch_max) for q in queues]
        for queue, n in zip(queues, wanted, strict=True):
            self._free[queue] -= n
            self._riding.add(queue)
        return queues, wanted

    def _launch_limited_claims(self) -> None:
        """Start a claim of its own for each limited queue ready for one, when no plain claim is in
        flight: else the next plain claim, due when that one is back, takes the queue with it."""
        if self._stopping or self._claims or self._completer.pending > PENDING_OUTCOMES_MAX:
            return
        for queue in self._limited_ready():
            wanted = min(self._free[queue], self._options.claim_batch_max)
            self._free[queue] -= wanted
            task = asyncio.create_task(self._claim_limited(queue, wanted))
            self._limited_claims[queue] = task
            task.add_done_callback(self._limited_claim_done)

    def _limited_claim_done(self, task: asyncio.Task[None]) -> None:
        for queue, in_flight in list(self._limited_claims.items()):
            if in_flight is task:
                del self._limited_claims[queue]
        self._wake.set()
        if not task.cancelled() and task.exception() is not None:
            log.error("job claim crashed", error=repr(task.exception()))

    async def _claim_limited(self, queue: str, wanted: int) -> None:
        """Claim up to `wanted` jobs of a limited queue within its limits (job_claim_limited),
        writing the pending completions in the same statement, as the plain claims do: a job of a
        globally limited queue that ended here frees its slot for this claim."""
        seen = self._notified[queue]
        batch = self._completer.take_completions()
        self._completer.claim_sent()
        try:
            claim = await self._limited.claim(
                queue, wanted, self._options.owner, self._options.lease_ms, self._options.quick_claim_commit,
                [c for _, c in batch], notify_completed=self.events.notify_completed,
                delete_completed=self._deletes(batch),
            )  # fmt: skip
        except BaseException as exc:
            self._completer.claim_returned()
            self._completer.put_back(batch)
            self._free[queue] += wanted
            if not isinstance(exc, DB_ERRORS):
                raise
            log.warning("job claim failed", queue=queue, error=str(exc))
            report_error(self._on_error, "claim", exc)
            if not isinstance(exc, LOCK_ERRORS):
                self._limited.block(queue, int(CLAIM_RETRY_DELAY_S * 1000))
            return
        self._completer.claim_returned()
        got = len(claim.jobs)
        self._free[queue] += wanted - got
        self._executor.start([self._hold(job) for job in claim.jobs])
        if batch:
            # After the starts, as in `_claim`: settling may wait (events sent to Redis). Before the
            # decision below: settling marks the completed jobs' capped queues as having a free
            # slot, which this claim has just taken.
            await self._completer.settled(batch, claim.completed)
        held_back = claim.retry_after_ms is not None
        self._limited_got(queue, wanted, got, seen, held_back, claim.retry_after_ms)
        self._wake.set()

    def _give_back(self, conn: PinnedConnection | Listener) -> None:
        if isinstance(conn, PinnedConnection):
            self._idle_conns.append(conn)

    async def _claim(
        self,
        conn: PinnedConnection | Listener,
        queues: list[str],
        wanted: list[int],
        limited: list[str],
        limited_wanted: list[int],
    ) -> None:
        """Claim into the reserved slots, writing pending completions in the same statement."""
        seen = {q: self._notified[q] for q in (*queues, *limited)}
        batch = self._completer.take_completions()
        params = ClaimParams(
            queues, wanted, self._options.owner, self._options.lease_ms, self._options.quick_claim_commit,
            [c for _, c in batch], self.events.notify_completed, self._deletes(batch),
            limited, limited_wanted,
        )  # fmt: skip
        self._completer.claim_sent()
        try:
            claimed = await claim(conn, params)
        except BaseException as exc:
            self._completer.claim_returned()
            self._completer.put_back(batch)
            for queue, n in zip((*queues, *limited), (*wanted, *limited_wanted), strict=True):
                self._free[queue] += n
            self._riding.difference_update(limited)
            if not isinstance(exc, DB_ERRORS):
                self._give_back(conn)
                raise
            log.warning("job claim failed", error=str(exc))
            report_error(self._on_error, "claim", exc)
            if not isinstance(exc, LOCK_ERRORS):
                await asyncio.sleep(CLAIM_RETRY_DELAY_S)
            self._give_back(conn)
            self._wake.set()
            return
        self._give_back(conn)
        self._completer.claim_returned()
        starts, done = self._claimed(claimed, queues, wanted, seen, limited, limited_wanted)
        # An idle worker's claim (nothing completed with it) runs its first job in its own task: a
        # new task would cost the enqueue-to-start path a task and a loop turn.
        # From then on the task is that job's, no longer a claim in flight (a stopping worker's
        # fetch loop waits for its claims: then every job gets its own task).
        task = asyncio.current_task()
        inline = bool(starts) and not batch and not self._stopping and task in self._claims
        self._executor.start(starts[1:] if inline else starts)
        if batch:
            await self._completer.settled(batch, done)
        if inline:
            assert task is not None
            self._claims.discard(task)
            ctx, held, backoff = starts[0]
            held.task = task
            await self._executor.run(ctx, held, backoff)

    def _deletes(self, batch: list[tuple[JobContext, Completion]]) -> bool:
        """Whether a claim's completions delete their rows: a flow's child is completed, never
        deleted, for its parent's trigger counts it."""
        return self._completer.delete_completed and all(ctx.parent_id is None for ctx, _ in batch)

    def _claimed(
        self,
        claimed: Claimed,
        queues: list[str],
        wanted: list[int],
        seen: dict[str, int],
        limited: list[str],
        limited_wanted: list[int],
    ) -> tuple[list[Ready], set[int]]:
        """Record what the claim got: the claimed jobs, held but not started, and the ids the
        statement completed."""
        got: dict[str, int] = dict.fromkeys(queues, 0)
        if limited:
            got.update(dict.fromkeys(limited, 0))
        starts: list[Ready] = []
        for job in claimed.jobs:
            got[job.queue] += 1
            starts.append(self._hold(job))
        # A claim that filled its slots met a backlog: the next one need not wait for the cooldown.
        self._last_claim_filled = any(got[q] >= n for q, n in zip(queues, wanted, strict=True))
        for queue, n in zip(queues, wanted, strict=True):
            self._free[queue] += n - got[queue]
            # Fewer than asked: the queue is drained, unless a NOTIFY arrived while we asked.
            if got[queue] < n and self._notified[queue] == seen[queue]:
                self._maybe_work[queue] = False
        if limited:
            self._limited_claimed(claimed, got, limited, limited_wanted, seen)
        self._wake.set()
        return starts, claimed.completed

    def _limited_claimed(
        self,
        claimed: Claimed,
        got: dict[str, int],
        queues: list[str],
        wanted: list[int],
        seen: dict[str, int],
    ) -> None:
        """Record what a plain claim got of the limited queues it took with it (`_reserve_limited`)."""
        for queue, n in zip(queues, wanted, strict=True):
            self._riding.discard(queue)
            self._free[queue] += n - got[queue]
            held_back = queue in claimed.held_back
            self._limited_got(queue, n, got[queue], seen[queue], held_back, claimed.held_back.get(queue))

    def _limited_got(
        self, queue: str, wanted: int, got: int, seen: int, held_back: bool, retry_after_ms: int | None
    ) -> None:
        """What a claim of a limited queue tells of it: `held_back` with `retry_after_ms`, its window
        is spent (or a pause runs), so no claim of it goes out until then; held back without one,
        another process was claiming it, so the next claim tries again; fewer jobs than wanted, no
        more jobs or its global concurrency reached, so it waits for a NOTIFY (unless one came
        while it was claimed: `seen`)."""
        if held_back:
            if retry_after_ms is not None:
                self._limited.block(queue, retry_after_ms)
        elif got < wanted and self._notified[queue] == seen:
            self._maybe_work[queue] = False

    def _hold(self, job: Job) -> Ready:
        """The claimed job's context, held (its slot taken, its timeout running); not started yet."""
        spec = self._registry.get(job.kind)
        max_attempts = job.max_attempts or (spec.max_attempts if spec else None)
        # Positional (JobContext's field order): one context per claimed job, and keywords cost more.
        ctx = JobContext(
            job.id, job.kind, job.queue, job.payload, job.attempt,
            max_attempts or self._options.default_max_attempts, job.priority, job.parent_id,
            job.lease_token, self._pool, self._progress,
        )  # fmt: skip
        if job.cancel_requested:
            ctx.cancelled.set()
        if job.waited_s is not None:
            metrics.WAIT_SECONDS.observe(job.queue, max(0.0, job.waited_s))
        if self._options.active_events:
            self._announce_active(JobEvent("active", job.id, job.kind, job.queue, job.attempt))
        timeout_ms = job.timeout_ms or (spec.timeout_ms if spec else None) or self._options.default_timeout_ms
        held = self._held[ctx] = Held(ctx, spec, time.monotonic() + timeout_ms / 1000)
        return ctx, held, job.backoff

    def _announce_active(self, event: JobEvent) -> None:
        """Queue an `active` event; the jobs of one claim go out in one publish, off the claim's path."""
        self._active.append(event)
        if len(self._active) == 1:
            asyncio.get_running_loop().call_soon(self._publish_active)

    def _publish_active(self) -> None:
        events, self._active = self._active, []
        task = asyncio.create_task(self.events.publish(events))
        self._publishing.add(task)
        task.add_done_callback(self._publishing.discard)

    def _settle(self, ctx: JobContext, outcome: Completion | Failure) -> None:
        """Hand the outcome to the completer and free the slot (the job stays held until written)."""
        self._completer.add(ctx, outcome)
        self._free[ctx.queue] += 1
        if isinstance(outcome, Completion) and ctx.queue in self._limited.capped:
            # The job's slot in the queue's global concurrency frees with its completion, which the
            # queue's next claim writes before it counts the slots: that claim may go now.
            self._maybe_work[ctx.queue] = True
        held = self._held.get(ctx)
        if held is not None:
            held.task = None
        self._wake.set()

    def _forget(self, contexts: list[JobContext], woken: bool = False) -> None:
        """The attempts' outcomes are written (or their leases are gone): they are no longer held.
        `woken`: completions whose statement woke their globally limited queues' workers."""
        for ctx in contexts:
            held = self._held.pop(ctx, None)
            if held is not None and held.task is not None:
                # Still counted as running: the slot frees here (lease lost, or completed in its tx).
                self._free[held.ctx.queue] += 1
                self._wake.set()
        if self._limited.wakes_on_finish:
            for ctx in contexts:
                if self._limited.finished(ctx.queue, woken=woken):
                    # A slot of the queue is free: this worker tries it at once, without waiting
                    # for its own NOTIFY to come back.
                    self._maybe_work[ctx.queue] = True

    def _requeued(self, queue: str) -> None:
        if queue in self._maybe_work:
            self._maybe_work[queue] = True
            self._notified[queue] += 1
            self._wake.set()

    async def _on_progress(self, ctx: JobContext, pct: float) -> None:
        await self.events.publish([JobEvent("progress", ctx.id, ctx.kind, ctx.queue, ctx.attempt, pct)])

    async def heartbeat(self) -> None:
        """Extend every held lease now (the heartbeat loop does it every heartbeat_interval_ms)."""
        await self._leases.heartbeat()


def _raise_young_threshold(threshold: int | None) -> None:
    """Collect the young generation less often (WorkerOptions.gc_young_threshold); never lowered: a
    process that set a higher one keeps it."""
    if threshold is None:
        return
    young, *older = gc.get_threshold()
    if young < threshold:
        gc.set_threshold(threshold, *older)
