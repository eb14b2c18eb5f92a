"""The maintenance service: rescuer, promoter of due jobs, pruner and periodic scheduler.

It is safe to run in every worker process: one process at a time is the leader (it holds a
PostgreSQL advisory lock on a dedicated connection) and runs the duties. If the leader dies, its
connection closes, the lock is released, and another process takes over within an election interval.
Each duty is also safe when two processes run it at once (SKIP LOCKED, conditional upserts), which
covers the moment between a lost connection and its detection.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import asyncpg

from paymanager.db.database import Database, over_pool
from paymanager.db.pool import Pool
from paymanager.jobs import metrics
from paymanager.jobs._store import dedup_prune, leader_try_lock, ping, promote_due, vacuum
from paymanager.jobs.events import DeadHook, DeadJob, EventPublisher, JobEvent
from paymanager.jobs.options import MaintenanceOptions
from paymanager.jobs.periodic import enqueue_due
from paymanager.jobs.pruner import prune_finished
from paymanager.jobs.rescuer import rescue_expired
from paymanager.jobs.states import JobState
from paymanager.logging import get_logger

# The longest a stop waits for the duty in progress before cancelling it.
STOP_WAIT_MAX_S = 1.0

log = get_logger("paymanager.jobs.maintenance")

# Any fixed 64-bit number works; this one spells "pm-jobs!" and is used by nothing else.
LEADER_LOCK_KEY = 0x706D2D6A6F627321
Clock = Callable[[], datetime]
DB_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError)


def system_clock() -> datetime:
    return datetime.now(UTC)


class Maintenance:
    name = "job-maintenance"

    def __init__(
        self,
        pool: Pool,
        database: Database | str,
        options: MaintenanceOptions | None = None,
        *,
        on_dead: DeadHook | None = None,
        clock: Clock | None = None,
        redis_url: str | None = None,
    ) -> None:
        self._pool = pool
        self._database = over_pool(pool, database)
        self._options = options or MaintenanceOptions()
        self._on_dead = on_dead
        # With a clock given (tests), every duty uses it; otherwise the server's clock where it can.
        self._clock = clock
        self._events = EventPublisher(pool, redis_url)
        self._lock_conn: Any = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self.is_leader = False
        self._next_run: dict[str, float] = {}

    async def start(self) -> None:
        await self._events.start()
        self._task = asyncio.create_task(self._run(), name=self.name)

    async def stop(self, timeout_s: float) -> None:
        self._stopping.set()
        if self._task is not None:
            try:
                # A duty in progress (a VACUUM, a prune) is cut after a second: it runs again later.
                await asyncio.wait_for(self._task, timeout=max(0.1, min(timeout_s, STOP_WAIT_MAX_S)))
            except (TimeoutError, asyncio.CancelledError):
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
        await self._resign()
        await self._events.close()

    async def _run(self) -> None:
        interval_s = self._options.election_interval_ms / 1000
        while not self._stopping.is_set():
            try:
                if self.is_leader or await self._elect():
                    await self._lead()
            except Exception as exc:
                log.warning("job maintenance error; resigning", error=str(exc))
                await self._resign()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=interval_s)

    async def _elect(self) -> bool:
        if self._lock_conn is None or self._lock_conn.is_closed():
            self._lock_conn = await self._database.connect(application_name="paymanager:job-leader")
        if await leader_try_lock(self._lock_conn, key=LEADER_LOCK_KEY):
            self.is_leader = True
            log.info("job maintenance leader elected")
        return self.is_leader

    async def _resign(self) -> None:
        self.is_leader = False
        conn, self._lock_conn = self._lock_conn, None
        if conn is not None:
            # Closing the session releases the advisory lock.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), timeout=1)
            if not conn.is_closed():
                conn.terminate()

    async def _lead(self) -> None:
        """Run the duties that are due while the lock connection lives."""
        options = self._options
        duties: list[tuple[str, int, Callable[[], Awaitable[None]]]] = [
            ("rescue", options.rescue_interval_ms, self.rescue),
            ("promote", options.promote_interval_ms, self.promote),
            ("prune", options.prune_interval_ms, self.prune),
            ("periodic", options.periodic_interval_ms, self.periodic),
        ]
        if options.vacuum_interval_ms is not None:
            duties.append(("vacuum", options.vacuum_interval_ms, self.vacuum))
        tick_s = min(interval for _, interval, _ in duties) / 1000
        while not self._stopping.is_set():
            await ping(self._lock_conn)
            for name, interval_ms, duty in duties:
                if time.monotonic() >= self._next_run.get(name, 0.0):
                    self._next_run[name] = time.monotonic() + interval_ms / 1000
                    try:
                        await duty()
                    except Exception as exc:
                        # One failing duty (a VACUUM cut by statement_timeout, say) must not stop
                        # the others; losing the lock connection is caught by the ping above.
                        log.warning("job maintenance duty failed", duty=name, error=str(exc))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=tick_s)

    def _now(self) -> datetime | None:
        return self._clock() if self._clock is not None else None

    async def rescue(self) -> None:
        async with self._pool.acquire() as conn:
            rows = await rescue_expired(
                conn,
                max_stalled=self._options.max_stalled,
                batch_max=self._options.rescue_batch_max,
                now=self._now(),
            )
        if not rows:
            return
        log.warning("jobs rescued from expired leases", count=len(rows))
        events = [JobEvent("stalled", r.id, r.kind, r.queue, r.attempt) for r in rows]
        dead = [r for r in rows if r.state is JobState.DEAD]
        for r in rows:
            metrics.RESCUED.labels(r.queue).inc()
        for r in dead:
            metrics.DEAD.labels(r.queue).inc()
        events += [JobEvent("dead", r.id, r.kind, r.queue, r.attempt, error="stalled") for r in dead]
        await self._events.publish(events)
        for row in dead:
            if self._on_dead is not None:
                try:
                    await self._on_dead(DeadJob(row.id, row.kind, row.queue, row.last_error, row.attempt))
                except Exception as exc:  # the hook is the caller's code
                    log.error("on-dead hook failed", job_id=row.id, error=repr(exc))

    async def promote(self) -> None:
        await promote_due(self._pool, now=self._now(), batch_max=self._options.promote_batch_max)

    async def prune(self) -> None:
        now = self._clock() if self._clock is not None else system_clock()
        async with self._pool.acquire() as conn:
            total = await prune_finished(
                conn, self._options.retention_for, now=now, batch_max=self._options.prune_batch_max
            )
            # Expired deduplication keys hold nothing any more (one batch a run: few deduplicate).
            await dedup_prune(conn, batch_max=self._options.prune_batch_max)
        if total:
            log.info("finished jobs pruned", count=total)

    async def vacuum(self) -> None:
        # A plain VACUUM takes no lock that blocks workers; a statement timeout may cut it short on
        # a huge table, and the next run (or autovacuum) continues.
        await vacuum(self._pool)

    async def periodic(self) -> None:
        if self._options.periodic:
            now = self._clock() if self._clock is not None else system_clock()
            await enqueue_due(self._pool, self._options.periodic, now)
