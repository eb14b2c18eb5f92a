"""Administration: list and inspect jobs, retry, replay dead jobs, cancel, pause/resume, prune, stats.

Used by the `paymanager jobs` CLI and the admin API. Every function takes a connection; listings are
bounded (LIST_LIMIT_MAX) and paginated by id.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from paymanager.db.pool import Conn
from paymanager.jobs import _store as store

# Re-exported: list_queues returns it.
from paymanager.jobs._store import QueueSettings as QueueSettings
from paymanager.jobs.options import (
    GLOBAL_CONCURRENCY_MAX,
    PRUNE_BATCH_MAX,
    QUEUE_PATTERN,
    RATE_MAX_MAX,
    RATE_WINDOW_MS_MAX,
    Retention,
)
from paymanager.jobs.pruner import prune_queue
from paymanager.jobs.states import JobState

LIST_LIMIT_MAX = 1_000
REPLAY_LIMIT_MAX = 100_000
MAX_DEPTH_MAX = 100_000_000
JOB_ID_MAX = 2**63 - 1
# A revival that meets a unique key taken meanwhile (a concurrent enqueue, retry or replay) is run
# again: the next statement sees the holder and leaves that job dead.
REVIVE_TRIES = 3
_RATE_TEXT = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*(ms|s|m|h)\s*$")
_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000}


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


def parse_rate_limit(text: str) -> tuple[int, int] | None:
    """`N/WINDOW` (`100/1s`, `5/500ms`, `600/m`, `1000/1h`) as (max_jobs, window_ms); `off`: None."""
    if text.strip().lower() == "off":
        return None
    match = _RATE_TEXT.match(text.lower())
    if match is None:
        raise ValueError(f"rate limit {text!r} must read N/WINDOW (100/1s, 5/500ms, 600/1m) or off")
    window_ms = int(match.group(2) or 1) * _UNIT_MS[match.group(3)]
    return int(match.group(1)), window_ms


def format_rate_limit(max_jobs: int, window_ms: int) -> str:
    """The inverse of parse_rate_limit, in the largest unit that divides the window."""
    for unit in ("h", "m", "s"):
        if window_ms % _UNIT_MS[unit] == 0:
            return f"{max_jobs}/{window_ms // _UNIT_MS[unit]}{unit}"
    return f"{max_jobs}/{window_ms}ms"


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
    total = 0
    for queue in await store.finished_queues(conn):
        chosen = (retention_by_queue or {}).get(queue, retention)
        total += await prune_queue(conn, queue, chosen, now=now, batch_max=batch_max)
    return total
