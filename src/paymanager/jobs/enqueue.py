"""Enqueueing on the caller's connection: the job commits or rolls back with the caller's change.

`enqueue` writes one job (with every option), `enqueue_many` many plain jobs in one statement, and
`enqueue_flow` a parent with its children, the parent waiting in `waiting_children`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import asyncpg
import orjson

from paymanager.db.pool import Conn, Pool
from paymanager.jobs import _store as store
from paymanager.jobs.backoff import Backoff
from paymanager.jobs.errors import InvalidJobError, PayloadTooLargeError, QueueFullError
from paymanager.jobs.options import ATTEMPTS_MAX, NAME_PATTERN, QUEUE_PATTERN
from paymanager.jobs.states import JobState

DEFAULT_MAX_PAYLOAD_BYTES = 256 * 1024
PRIORITY_MIN, PRIORITY_MAX = -1000, 1000
TIMEOUT_MS_MAX = 86_400_000
UNIQUE_KEY_CHARS_MAX = 512
# One multi-row statement carries at most this many jobs; enqueue_many splits larger inputs.
INSERT_MANY_CHUNK = 5_000
FLOW_CHILDREN_MAX = 1_000

ChildPolicy = Literal["fail", "ignore"]


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    id: int
    # False when an unfinished job already held the unique key: `id` is that job's.
    created: bool


@dataclass(frozen=True, slots=True)
class NewJob:
    """One job for `enqueue_many` or a flow."""

    kind: str
    payload: dict[str, Any] = field(default_factory=dict)
    queue: str = "default"
    priority: int = 0
    run_at: datetime | None = None
    max_attempts: int | None = None
    backoff: Backoff | None = None
    timeout_ms: int | None = None


def validate_job(
    kind: str,
    queue: str,
    payload: dict[str, Any],
    priority: int,
    max_attempts: int | None,
    timeout_ms: int | None,
    max_payload_bytes: int,
) -> None:
    """The schema's CHECKs, in code, so a bad job fails with a message before any round trip."""
    if not NAME_PATTERN.match(kind):
        raise InvalidJobError(f"job kind {kind!r} must match {NAME_PATTERN.pattern}")
    if not QUEUE_PATTERN.match(queue):
        raise InvalidJobError(f"queue {queue!r} must match {QUEUE_PATTERN.pattern}")
    if not isinstance(payload, dict):
        raise InvalidJobError(f"payload must be a dict, got {type(payload).__name__}")
    if not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise InvalidJobError(f"priority must be within [{PRIORITY_MIN}, {PRIORITY_MAX}], got {priority}")
    if max_attempts is not None and not 1 <= max_attempts <= ATTEMPTS_MAX:
        raise InvalidJobError(f"max_attempts must be within [1, {ATTEMPTS_MAX}], got {max_attempts}")
    if timeout_ms is not None and not 1 <= timeout_ms <= TIMEOUT_MS_MAX:
        raise InvalidJobError(f"timeout_ms must be within [1, {TIMEOUT_MS_MAX}], got {timeout_ms}")
    size = len(orjson.dumps(payload))
    if size > max_payload_bytes:
        raise PayloadTooLargeError(size, max_payload_bytes)


async def enqueue(
    conn: Conn,
    kind: str,
    payload: dict[str, Any],
    *,
    queue: str = "default",
    priority: int = 0,
    run_at: datetime | None = None,
    delay_ms: int | None = None,
    max_attempts: int | None = None,
    backoff: Backoff | None = None,
    unique_key: str | None = None,
    timeout_ms: int | None = None,
    parent_id: int | None = None,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
) -> EnqueueResult:
    """Write one job on `conn` (inside the caller's transaction, if any).

    With `unique_key`, enqueueing again while a job holding the key is unfinished returns that job
    with `created=False`. A queue at its maximum depth raises `QueueFullError`.
    """
    validate_job(kind, queue, payload, priority, max_attempts, timeout_ms, max_payload_bytes)
    if delay_ms is not None and not 0 <= delay_ms <= TIMEOUT_MS_MAX * 366:
        raise InvalidJobError(f"delay_ms must be within [0, one year], got {delay_ms}")
    if unique_key is not None and not 1 <= len(unique_key) <= UNIQUE_KEY_CHARS_MAX:
        raise InvalidJobError(f"unique_key must be 1 to {UNIQUE_KEY_CHARS_MAX} characters")
    return await _insert(
        conn, kind, payload, queue=queue, priority=priority, run_at=run_at, delay_ms=delay_ms,
        max_attempts=max_attempts, backoff=backoff, unique_key=unique_key, timeout_ms=timeout_ms,
        parent_id=parent_id,
    )  # fmt: skip


async def _insert(
    conn: Conn,
    kind: str,
    payload: dict[str, Any],
    *,
    queue: str,
    priority: int,
    run_at: datetime | None,
    delay_ms: int | None,
    max_attempts: int | None,
    backoff: Backoff | None,
    unique_key: str | None,
    timeout_ms: int | None,
    parent_id: int | None,
    state: JobState | None = None,
    pending_children: int = 0,
    on_child_dead: ChildPolicy = "fail",
    tries_left: int = 3,
) -> EnqueueResult:
    backoff_json = backoff.to_json() if backoff is not None else None
    job_id = await store.insert(
        conn,
        store.InsertParams(
            queue=queue, kind=kind, payload=payload, priority=priority, run_at=run_at, delay_ms=delay_ms,
            max_attempts=max_attempts, backoff=backoff_json, unique_key=unique_key, timeout_ms=timeout_ms,
            parent_id=parent_id, state=state, pending_children=pending_children, on_child_dead=on_child_dead,
        ),
    )  # fmt: skip
    if job_id is not None:
        return EnqueueResult(job_id, True)
    if unique_key is not None:
        # Either the key is held, or the queue is full. Read the holder in a fresh snapshot: a
        # holder committed while our insert waited on it is invisible to the insert's own snapshot.
        holder = await store.find_unfinished_by_key(conn, unique_key=unique_key)
        if holder is not None:
            return EnqueueResult(holder, False)
    if await store.queue_is_full(conn, queue=queue):
        raise QueueFullError(queue)
    # The holder finished between our two statements: the key is free now, so try again (bounded:
    # each try needs another job to take and release the key within a few milliseconds).
    if tries_left <= 0:
        raise InvalidJobError(f"unique key {unique_key!r} is contended; enqueue again")
    return await _insert(
        conn, kind, payload, queue=queue, priority=priority, run_at=run_at, delay_ms=delay_ms,
        max_attempts=max_attempts, backoff=backoff, unique_key=unique_key, timeout_ms=timeout_ms,
        parent_id=parent_id, state=state, pending_children=pending_children, on_child_dead=on_child_dead,
        tries_left=tries_left - 1,
    )  # fmt: skip


async def enqueue_many(
    conn: Conn, jobs: Sequence[NewJob], *, max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
) -> list[int]:
    """Write many jobs in one multi-row statement per chunk of 5,000; returns their ids in order.

    Jobs here carry no unique key, parent or queue-depth check: use `enqueue` for those.
    """
    ids: list[int] = []
    for start in range(0, len(jobs), INSERT_MANY_CHUNK):
        chunk = jobs[start : start + INSERT_MANY_CHUNK]
        for job in chunk:
            validate_job(
                job.kind, job.queue, job.payload, job.priority, job.max_attempts, job.timeout_ms,
                max_payload_bytes,
            )  # fmt: skip
        params = store.InsertManyParams(
            queues=[j.queue for j in chunk],
            kinds=[j.kind for j in chunk],
            payloads=[j.payload for j in chunk],
            priorities=[j.priority for j in chunk],
            run_ats=[j.run_at for j in chunk],
            max_attempts=[j.max_attempts for j in chunk],
            backoffs=[j.backoff.to_json() if j.backoff is not None else None for j in chunk],
            timeouts_ms=[j.timeout_ms for j in chunk],
        )
        ids.extend(await store.insert_many(conn, params))
    return ids


async def enqueue_flow(
    conn: Conn | Pool,
    parent: NewJob,
    children: Sequence[NewJob],
    *,
    on_child_dead: ChildPolicy = "fail",
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
) -> tuple[int, list[int]]:
    """Write a parent that waits in `waiting_children` and its children; returns their ids.

    The parent runs once every child completed (`ctx.children_results()` gives their results). A
    dead or cancelled child fails the parent (`on_child_dead="fail"`) or is ignored (`"ignore"`).
    The flow is written whole or not at all: in a transaction of its own, a savepoint when `conn`
    is already in one (a pool: on a connection of its own).
    """
    if not 1 <= len(children) <= FLOW_CHILDREN_MAX:
        raise InvalidJobError(f"a flow needs 1 to {FLOW_CHILDREN_MAX} children, got {len(children)}")
    if on_child_dead not in ("fail", "ignore"):
        raise InvalidJobError(f"on_child_dead must be 'fail' or 'ignore', got {on_child_dead!r}")
    for job in (parent, *children):
        validate_job(
            job.kind, job.queue, job.payload, job.priority, job.max_attempts, job.timeout_ms,
            max_payload_bytes,
        )  # fmt: skip
    # Whole or not at all: a transaction of its own (a savepoint inside the caller's), so a child
    # refused half-way (QueueFullError) cannot leave a parent waiting for children never written.
    if isinstance(conn, asyncpg.Pool):
        async with conn.acquire() as own, own.transaction():
            return await _write_flow(own, parent, children, on_child_dead)
    async with conn.transaction():
        return await _write_flow(conn, parent, children, on_child_dead)


async def _write_flow(
    conn: Conn, parent: NewJob, children: Sequence[NewJob], on_child_dead: ChildPolicy
) -> tuple[int, list[int]]:
    parent_result = await _insert_new(
        conn, parent, state=JobState.WAITING_CHILDREN, pending=len(children), on_child_dead=on_child_dead
    )
    child_ids = [(await _insert_new(conn, child, parent_id=parent_result.id)).id for child in children]
    return parent_result.id, child_ids


async def _insert_new(
    conn: Conn,
    job: NewJob,
    *,
    parent_id: int | None = None,
    state: JobState | None = None,
    pending: int = 0,
    on_child_dead: ChildPolicy = "fail",
) -> EnqueueResult:
    return await _insert(
        conn, job.kind, job.payload, queue=job.queue, priority=job.priority, run_at=job.run_at,
        delay_ms=None, max_attempts=job.max_attempts, backoff=job.backoff, unique_key=None,
        timeout_ms=job.timeout_ms, parent_id=parent_id, state=state, pending_children=pending,
        on_child_dead=on_child_dead,
    )  # fmt: skip
