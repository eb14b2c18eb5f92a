"""Administration: list and inspect jobs, retry, replay dead jobs, cancel, change, promote, remove,
drain and obliterate, pause/resume, prune, stats.

Used by the `paymanager jobs` CLI and the admin API. Every function takes a connection; listings are
bounded (LIST_LIMIT_MAX) and paginated by id.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from paymanager.db.pool import Conn
from paymanager.jobs import _store as store
from paymanager.jobs._queries import CHANNEL_EVENTS

# Re-exported: list_queues returns it.
from paymanager.jobs._store import QueueSettings as QueueSettings
from paymanager.jobs.enqueue import PRIORITY_MAX, PRIORITY_MIN, TIMEOUT_MS_MAX, payload_json
from paymanager.jobs.events import JobEvent, event_messages
from paymanager.jobs.options import (
    GLOBAL_CONCURRENCY_MAX,
    PRUNE_BATCH_MAX,
    QUEUE_PATTERN,
    RATE_MAX_MAX,
    RATE_WINDOW_MS_MAX,
    Retention,
)
from paymanager.jobs.pruner import prune_finished
from paymanager.jobs.states import JobState
from paymanager.rate_text import format_rate_limit as format_rate_limit
from paymanager.rate_text import parse_rate_limit as parse_rate_limit

LIST_LIMIT_MAX = 1_000
REPLAY_LIMIT_MAX = 100_000
MAX_DEPTH_MAX = 100_000_000
JOB_ID_MAX = 2**63 - 1
# A revival that meets a unique key taken meanwhile (a concurrent enqueue, retry or replay) is run
# again: the next statement sees the holder and leaves that job dead.
REVIVE_TRIES = 3
# Drain and obliterate delete in batches of this many, each its own statement.
REMOVE_BATCH = 10_000
_WAITING = (JobState.AVAILABLE,)
_DELAYED = (JobState.SCHEDULED, JobState.RETRYABLE)
_UNFINISHED_NOT_RUNNING = (
    JobState.AVAILABLE, JobState.SCHEDULED, JobState.RETRYABLE, JobState.WAITING_CHILDREN,
)  # fmt: skip


def _check_queue(queue: str) -> None:
    if not QUEUE_PATTERN.match(queue):
        raise ValueError(f"queue {queue!r} must match {QUEUE_PATTERN.pattern}")


def _check_id(job_id: int) -> None:
    if not 1 <= job_id <= JOB_ID_MAX:
        raise ValueError(f"job id must be within [1, {JOB_ID_MAX}]")


@dataclass(frozen=True, slots=True)
class CancelResult:
    id: int
    # "cancelled" when the job had not started; "requested" when it runs and was asked to stop.
    outcome: str


async def list_jobs(
    conn: Conn,
    *,
    state: JobState | None = None,
    queue: str | None = None,
    kind: str | None = None,
    before_id: int | None = None,
    limit: int = 50,
    payload_contains: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Jobs newest first; pass the last id seen as `before_id` for the next page. `payload_contains`
    keeps the jobs whose payload holds those keys and values (`{"intent_id": ...}`)."""
    if not 1 <= limit <= LIST_LIMIT_MAX:
        raise ValueError(f"limit must be within [1, {LIST_LIMIT_MAX}]")
    where = store.JobFilter(state=state, queue=queue, kind=kind, payload_contains=payload_contains)
    return await store.list_jobs(conn, where=where, before_id=before_id, limit=limit)


async def get_job(conn: Conn, job_id: int) -> dict[str, Any] | None:
    """Every column of a job, the error history included."""
    _check_id(job_id)
    return await store.get_job(conn, job_id=job_id)


async def retry_job(conn: Conn, job_id: int) -> bool:
    """Make a dead, cancelled, retryable or scheduled job available now; False if it is not one."""
    _check_id(job_id)
    try:
        return await store.retry_job(conn, job_id=job_id)
    except asyncpg.UniqueViolationError:
        # Its unique key was taken by a job committed while this one waited: it stays as it was.
        return False


async def replay_dead(
    conn: Conn,
    *,
    kind: str | None = None,
    queue: str | None = None,
    error_contains: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int = 1_000,
) -> list[int]:
    """Replay every dead job matching all given filters (up to `limit`); returns their ids."""
    if not 1 <= limit <= REPLAY_LIMIT_MAX:
        raise ValueError(f"limit must be within [1, {REPLAY_LIMIT_MAX}]")
    where = store.JobFilter(queue=queue, kind=kind, error_contains=error_contains, since=since, until=until)
    for attempt in range(1, REVIVE_TRIES + 1):
        try:
            return await store.replay_dead(conn, where=where, limit=limit)
        except asyncpg.UniqueViolationError:
            if attempt == REVIVE_TRIES:
                raise
    raise AssertionError("unreachable")


async def cancel_job(conn: Conn, job_id: int) -> CancelResult | None:
    """Cancel a job that has not started, or ask a running one to stop; None if it is finished."""
    _check_id(job_id)
    state = await store.cancel_job(conn, job_id=job_id)
    if state is None:
        return None
    return CancelResult(job_id, "requested" if state is JobState.RUNNING else "cancelled")


async def pause_queue(conn: Conn, queue: str) -> None:
    """Workers claim nothing more from `queue` (running jobs finish) until it is resumed."""
    _check_queue(queue)
    await store.set_paused(conn, queue=queue, paused=True)


async def resume_queue(conn: Conn, queue: str) -> None:
    _check_queue(queue)
    await store.set_paused(conn, queue=queue, paused=False)


async def set_max_depth(conn: Conn, queue: str, max_depth: int | None) -> None:
    """Enqueue refuses (QueueFullError) once `queue` holds `max_depth` unfinished jobs; None: no limit."""
    _check_queue(queue)
    if max_depth is not None and not 1 <= max_depth <= MAX_DEPTH_MAX:
        raise ValueError(f"max_depth must be within [1, {MAX_DEPTH_MAX}] or None")
    await store.set_max_depth(conn, queue=queue, max_depth=max_depth)


async def set_rate_limit(conn: Conn, queue: str, *, max_jobs: int | None, window_ms: int = 1000) -> None:
    """At most `max_jobs` jobs of `queue` STARTED per window of `window_ms`, over every process;
    None removes the limit. Windows are consecutive spans of `window_ms` from the Unix epoch; the
    count starts again when the limit changes. Workers learn of it at once (a NOTIFY) or at their
    next poll."""
    _check_queue(queue)
    if max_jobs is not None:
        if not 1 <= max_jobs <= RATE_MAX_MAX:
            raise ValueError(f"max_jobs must be within [1, {RATE_MAX_MAX}] or None")
        if not 1 <= window_ms <= RATE_WINDOW_MS_MAX:
            raise ValueError(f"window_ms must be within [1, {RATE_WINDOW_MS_MAX}]")
    window = window_ms if max_jobs is not None else None
    await store.set_rate_limit(conn, queue=queue, max_jobs=max_jobs, window_ms=window)


async def set_global_concurrency(conn: Conn, queue: str, limit: int | None) -> None:
    """At most `limit` jobs of `queue` RUNNING at once over every process (beside each worker's own
    concurrency); None removes the limit."""
    _check_queue(queue)
    if limit is not None and not 1 <= limit <= GLOBAL_CONCURRENCY_MAX:
        raise ValueError(f"the global concurrency must be within [1, {GLOBAL_CONCURRENCY_MAX}] or None")
    await store.set_global_concurrency(conn, queue=queue, limit=limit)


async def set_waiting_events(conn: Conn, queue: str, enabled: bool) -> None:
    """Whether `queue` publishes a `waiting` event for each job that becomes available by an enqueue
    or by the promotion of its due time (off by default: a NOTIFY per such job)."""
    _check_queue(queue)
    await store.set_waiting_events(conn, queue=queue, enabled=enabled)


async def list_queues(conn: Conn) -> list[QueueSettings]:
    """Every queue with settings (pause, depth, limits), by name."""
    return await store.list_queues(conn)


async def stats(conn: Conn) -> dict[str, dict[str, int]]:
    """Job counts per queue and state."""
    return await store.count_by_queue_and_state(conn)


async def oldest_available_age(conn: Conn) -> dict[str, float]:
    """Per queue with available jobs, seconds since its oldest one was due."""
    return await store.oldest_available_age(conn)


async def prune(
    conn: Conn,
    retention: Retention,
    *,
    retention_by_queue: dict[str, Retention] | None = None,
    now: datetime | None = None,
    batch_max: int = 10_000,
) -> int:
    """Apply retention to every queue now; returns how many jobs were deleted."""
    if not 1 <= batch_max <= PRUNE_BATCH_MAX:
        raise ValueError(f"batch_max must be within [1, {PRUNE_BATCH_MAX}]")
    by_queue = retention_by_queue or {}
    total = await prune_finished(
        conn, lambda queue: by_queue.get(queue, retention), now=now, batch_max=batch_max
    )
    await store.dedup_prune(conn, batch_max=batch_max)
    return total


async def change_job(
    conn: Conn,
    job_id: int,
    *,
    payload: dict[str, Any] | None = None,
    priority: int | None = None,
    delay_ms: int | None = None,
) -> JobState | None:
    """Change a job that has not started: its payload, its priority, or its delay (from now; 0 makes
    it available at once). Returns its state after, or None when it has started, finished or is
    gone (nothing changed). A flow parent waiting for its children takes no delay."""
    _check_id(job_id)
    if priority is not None and not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise ValueError(f"priority must be within [{PRIORITY_MIN}, {PRIORITY_MAX}], got {priority}")
    if delay_ms is not None and not 0 <= delay_ms <= TIMEOUT_MS_MAX * 366:
        raise ValueError(f"delay_ms must be within [0, one year], got {delay_ms}")
    stored = payload_json(payload) if payload is not None else None
    if stored is not None and not isinstance(stored, dict):
        raise ValueError("payload must be a JSON object")
    return await store.change_job(conn, job_id=job_id, payload=stored, priority=priority, delay_ms=delay_ms)


async def promote_job(conn: Conn, job_id: int) -> bool:
    """Run a scheduled (delayed) or retryable job now, its attempts unchanged; False if it is
    neither."""
    _check_id(job_id)
    return await store.promote_job(conn, job_id=job_id)


async def remove_job(conn: Conn, job_id: int) -> bool:
    """Delete a job that is not running (a `removed` event); a flow child not finished is cancelled
    first, so its parent follows its failure policy. False when it runs or does not exist."""
    _check_id(job_id)
    async with conn.transaction():
        removed = await store.remove_job(conn, job_id=job_id)
        if removed is None:
            return False
        await _publish(conn, [JobEvent("removed", removed.id, removed.kind, removed.queue)])
    return True


async def drain_queue(conn: Conn, queue: str, *, delayed: bool = True) -> int:
    """Delete the jobs of `queue` waiting to run: available ones, and scheduled and retryable ones
    unless `delayed` is False. Running jobs, flow parents waiting for their children and finished
    jobs stay. A removed flow child is cancelled first, so its parent follows its failure policy.
    Publishes one `drained` event; returns how many jobs were deleted."""
    _check_queue(queue)
    states = _WAITING + (_DELAYED if delayed else ())
    total = await _delete_queue_jobs(conn, queue, states)
    await _publish(conn, [JobEvent("drained", 0, "", queue, count=total)])
    return total


class QueueBusyError(Exception):
    """Obliterate refused: jobs of the queue are running (pass force to delete them anyway)."""


async def obliterate_queue(conn: Conn, queue: str, *, force: bool = False) -> int:
    """Delete `queue`: every job of it in any state (its history included) and its settings. A queue
    with running jobs is refused (QueueBusyError) unless `force`: their workers' outcomes then match
    no row. Unfinished flow children are cancelled first, so parents in other queues follow their
    failure policy. Publishes one `drained` event; returns how many jobs were deleted."""
    _check_queue(queue)
    running = await store.count_running_in_queue(conn, queue=queue)
    if running and not force:
        raise QueueBusyError(f"queue {queue} has {running} running job(s); stop them or force")
    every = tuple(JobState)
    total = await _delete_queue_jobs(conn, queue, every)
    await store.delete_queue_settings(conn, queue=queue)
    await _publish(conn, [JobEvent("drained", 0, "", queue, count=total)])
    return total


async def _delete_queue_jobs(conn: Conn, queue: str, states: tuple[JobState, ...]) -> int:
    unfinished = [s for s in states if s in _UNFINISHED_NOT_RUNNING or s is JobState.RUNNING]
    async with conn.transaction():
        # The flow children cancelled here are deleted with the rest (by id: they are `cancelled`).
        cancelled = await store.cancel_children_in_queue(conn, queue=queue, states=unfinished)
        total = 0
        while True:
            n = await store.delete_in_queue(
                conn, queue=queue, states=states, ids=cancelled, batch_max=REMOVE_BATCH
            )
            total += n
            if n < REMOVE_BATCH:
                break
    return total


async def _publish(conn: Conn, events: list[JobEvent]) -> None:
    # On the caller's connection: delivered when its transaction commits, never for a rollback.
    for message in event_messages(events):
        await store.publish_events(conn, channel=CHANNEL_EVENTS, message=message)
