"""Enqueueing on the caller's connection: the job commits or rolls back with the caller's change.

`enqueue` writes one job (with every option: a unique key, a deduplication key, LIFO), `enqueue_many`
many plain jobs in one statement, and `enqueue_flow` a parent with its children (each child may be a
flow itself), the parent waiting in `waiting_children`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import asyncpg
import orjson
from pydantic import BaseModel

from paymanager.db.pool import Conn, Pool
from paymanager.jobs import _store as store
from paymanager.jobs.backoff import Backoff
from paymanager.jobs.errors import CodecError, InvalidJobError, PayloadTooLargeError, QueueFullError
from paymanager.jobs.options import ATTEMPTS_MAX, NAME_PATTERN, QUEUE_PATTERN
from paymanager.jobs.states import JobState
from paymanager.tracing import with_trace

if TYPE_CHECKING:
    from paymanager.db.database import Database
    from paymanager.jobs.events import FinishedJob

DEFAULT_MAX_PAYLOAD_BYTES = 256 * 1024
PRIORITY_MIN, PRIORITY_MAX = -1000, 1000
TIMEOUT_MS_MAX = 86_400_000
UNIQUE_KEY_CHARS_MAX = 512
DEDUP_TTL_MS_MAX = 366 * 86_400_000
# A deduplicated enqueue that meets its key's job starting between two statements tries again.
DEDUP_TRIES = 3
# One multi-row statement carries at most this many jobs; enqueue_many splits larger inputs.
INSERT_MANY_CHUNK = 5_000

T = TypeVar("T")
FLOW_CHILDREN_MAX = 1_000

ChildPolicy = Literal["fail", "ignore", "continue"]
CHILD_POLICIES = ("fail", "ignore", "continue")


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    id: int
    # False when an unfinished job already held the unique key, or a job held the deduplication
    # key: `id` is that job's.
    created: bool
    # True when a debounce gave the newest payload, priority and delay to the waiting job `id`.
    replaced: bool = False

    async def wait_until_finished(self, database: Database, timeout_s: float) -> FinishedJob:
        """`events.wait_until_finished` for this job: how it ended (completed, dead, cancelled)."""
        from paymanager.jobs.events import wait_until_finished

        return await wait_until_finished(database, self.id, timeout_s)


@dataclass(frozen=True, slots=True)
class Dedup:
    """A deduplication key held for `ttl_ms` from the enqueue that took it, whatever its job's
    state (throttle); with `debounce`, held only while its job still waits, and each enqueue that
    meets it gives that job its payload, priority and delay and starts the time to live again.
    docs/state_machines.md, "Deduplication", compares it with the unique key."""

    key: str
    ttl_ms: int
    debounce: bool = False

    def __post_init__(self) -> None:
        if not 1 <= len(self.key) <= UNIQUE_KEY_CHARS_MAX:
            raise InvalidJobError(f"a deduplication key must be 1 to {UNIQUE_KEY_CHARS_MAX} characters")
        if not 1 <= self.ttl_ms <= DEDUP_TTL_MS_MAX:
            raise InvalidJobError(f"a deduplication ttl_ms must be within [1, {DEDUP_TTL_MS_MAX}]")


@dataclass(frozen=True, slots=True)
class NewJob:
    """One job for `enqueue_many` or a flow."""

    kind: str
    payload: dict[str, Any] | BaseModel = field(default_factory=dict)
    queue: str = "default"
    priority: int = 0
    run_at: datetime | None = None
    max_attempts: int | None = None
    backoff: Backoff | None = None
    timeout_ms: int | None = None
    # As a flow's child: what its death does to its parent (None: the parent's policy).
    on_dead: ChildPolicy | None = None


@dataclass(frozen=True, slots=True)
class Flow:
    """A flow: `parent` runs once its `children` finished; a child may be a Flow itself (any depth).
    `on_child_dead` is the parent's policy for a child that is dead or cancelled; a child's own
    `on_dead` (on a NewJob, or on a Flow as its parent's child) wins over it."""

    parent: NewJob
    children: Sequence[NewJob | Flow]
    on_child_dead: ChildPolicy = "fail"
    # This flow's policy as a child of an enclosing flow (None: the enclosing parent's).
    on_dead: ChildPolicy | None = None


def validate_job(
    kind: str,
    queue: str,
    payload: dict[str, Any],
    priority: int,
    max_attempts: int | None,
    timeout_ms: int | None,
    max_payload_bytes: int,
) -> bytes:
    """The schema's CHECKs, in code, so a bad job fails with a message before any round trip;
    returns the payload's JSON (its size is what the limit counts)."""
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
    encoded = orjson.dumps(payload)
    if len(encoded) > max_payload_bytes:
        raise PayloadTooLargeError(len(encoded), max_payload_bytes)
    return encoded


async def enqueue(
    conn: Conn,
    kind: str,
    payload: dict[str, Any] | BaseModel,
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
    dedup: Dedup | None = None,
    lifo: bool = False,
    notify: bool = True,
) -> EnqueueResult:
    """Write one job on `conn` (inside the caller's transaction, if any).

    With `unique_key`, enqueueing again while a job holding the key is unfinished returns that job
    with `created=False`. With `dedup`, a key held for a time (throttle) or while its job waits
    (debounce: that job takes this payload, priority and delay, `replaced=True`). With `lifo`, the job runs
    before the waiting jobs of its priority, the newest first. A queue at its maximum depth raises
    `QueueFullError`. `payload` may be a pydantic model (stored as its JSON form). With
    `notify=False` the insert sends no NOTIFY, so the caller's commit does not take PostgreSQL's
    NOTIFY lock: the caller wakes the queue after its commit (`wake_text`, db/notices.py), or the
    workers find the job at their next poll.
    """
    # The active trace goes with the job (TRACING_ENABLED): its attempt's span joins the caller's trace.
    payload = with_trace(payload_json(payload))
    validate_job(kind, queue, payload, priority, max_attempts, timeout_ms, max_payload_bytes)
    if delay_ms is not None and not 0 <= delay_ms <= TIMEOUT_MS_MAX * 366:
        raise InvalidJobError(f"delay_ms must be within [0, one year], got {delay_ms}")
    if unique_key is not None and not 1 <= len(unique_key) <= UNIQUE_KEY_CHARS_MAX:
        raise InvalidJobError(f"unique_key must be 1 to {UNIQUE_KEY_CHARS_MAX} characters")
    if lifo and (run_at is not None or delay_ms):
        raise InvalidJobError("a LIFO job runs now: give it no run_at or delay_ms")
    if dedup is not None:
        if unique_key is not None:
            raise InvalidJobError("give a job a unique_key or a dedup key, not both")
        if parent_id is not None:
            raise InvalidJobError("a flow's child cannot be deduplicated")
        return await _enqueue_deduplicated(
            conn, kind, payload, dedup, queue=queue, priority=priority, run_at=run_at, delay_ms=delay_ms,
            max_attempts=max_attempts, backoff=backoff, timeout_ms=timeout_ms, lifo=lifo,
        )  # fmt: skip
    return await _insert(
        conn, kind, payload, queue=queue, priority=priority, run_at=run_at, delay_ms=delay_ms,
        max_attempts=max_attempts, backoff=backoff, unique_key=unique_key, timeout_ms=timeout_ms,
        parent_id=parent_id, lifo=lifo, notify=notify,
    )  # fmt: skip


def payload_json(payload: dict[str, Any] | BaseModel) -> dict[str, Any]:
    """A payload as stored: a dict as given, a pydantic model as its JSON form."""
    if isinstance(payload, BaseModel):
        return payload.model_dump(mode="json")
    return payload


async def _enqueue_deduplicated(
    conn: Conn,
    kind: str,
    payload: dict[str, Any],
    dedup: Dedup,
    *,
    queue: str,
    priority: int,
    run_at: datetime | None,
    delay_ms: int | None,
    max_attempts: int | None,
    backoff: Backoff | None,
    timeout_ms: int | None,
    lifo: bool,
) -> EnqueueResult:
    # One transaction (a savepoint in the caller's): the key and its job are written together, and
    # a job refused (QueueFullError) leaves the key as it was.
    async with conn.transaction():
        for _ in range(DEDUP_TRIES):
            if await store.dedup_take(conn, key=dedup.key, ttl_ms=dedup.ttl_ms, debounce=dedup.debounce):
                result = await _insert(
                    conn, kind, payload, queue=queue, priority=priority, run_at=run_at, delay_ms=delay_ms,
                    max_attempts=max_attempts, backoff=backoff, unique_key=None, timeout_ms=timeout_ms,
                    parent_id=None, lifo=lifo,
                )  # fmt: skip
                await store.dedup_set_job(conn, key=dedup.key, job_id=result.id)
                return result
            if not dedup.debounce:
                holder = await store.dedup_holder(conn, key=dedup.key)
                if holder is not None:
                    return EnqueueResult(holder, False)
                continue
            newest = store.Replacement(payload, priority, run_at, delay_ms, lifo)
            replaced = await store.dedup_replace(conn, key=dedup.key, ttl_ms=dedup.ttl_ms, new=newest)
            if replaced is not None:
                return EnqueueResult(replaced, False, replaced=True)
            # Its job started between the two statements: the key is free for a new job now.
    raise InvalidJobError(f"deduplication key {dedup.key!r} is contended; enqueue again")


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
    parent_policy: ChildPolicy | None = None,
    lifo: bool = False,
    notify: bool = True,
    tries_left: int = 3,
) -> EnqueueResult:
    backoff_json = backoff.to_json() if backoff is not None else None
    try:
        job_id = await store.insert(
            conn,
            store.InsertParams(
                queue=queue, kind=kind, payload=payload, priority=priority, run_at=run_at, delay_ms=delay_ms,
                max_attempts=max_attempts, backoff=backoff_json, unique_key=unique_key, timeout_ms=timeout_ms,
                parent_id=parent_id, state=state, pending_children=pending_children,
                on_child_dead=on_child_dead, lifo=lifo, parent_policy=parent_policy, notify=notify,
            ),
        )  # fmt: skip
    except asyncpg.DataError as exc:
        # asyncpg's own text for a dict where its default jsonb codec wants a str.
        if "expected str, got dict" in str(exc):
            raise CodecError("this connection encodes jsonb as text") from None
        raise
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
        parent_policy=parent_policy, lifo=lifo, notify=notify, tries_left=tries_left - 1,
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
        encoded = [
            validate_job(
                job.kind, job.queue, payload_json(job.payload), job.priority, job.max_attempts,
                job.timeout_ms, max_payload_bytes,
            )
            for job in chunk
        ]  # fmt: skip
        params = store.InsertManyParams(
            queues=[j.queue for j in chunk],
            kinds=[j.kind for j in chunk],
            payloads=(b"[" + b",".join(encoded) + b"]").decode(),
            priorities=[j.priority for j in chunk],
            run_ats=_unless_all_none([j.run_at for j in chunk]),
            max_attempts=_unless_all_none([j.max_attempts for j in chunk]),
            backoffs=_unless_all_none([None if j.backoff is None else j.backoff.to_json() for j in chunk]),
            timeouts_ms=_unless_all_none([j.timeout_ms for j in chunk]),
        )
        ids.extend(await store.insert_many(conn, params))
    return ids


def _unless_all_none(column: list[T | None]) -> list[T | None] | None:
    """A column as job_insert_many takes it: None when no job sets it (the statement reads a NULL
    array as NULL for every job, and the driver then encodes nothing)."""
    return None if all(value is None for value in column) else column


async def enqueue_flow(
    conn: Conn | Pool,
    parent: NewJob | Flow,
    children: Sequence[NewJob | Flow] = (),
    *,
    on_child_dead: ChildPolicy = "fail",
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
) -> tuple[int, list[int]]:
    """Write a parent that waits in `waiting_children` and its children; returns their ids (the
    parent's and its direct children's; a child that is a Flow is given by its own parent's id).

    Either `enqueue_flow(conn, parent_job, children, on_child_dead=...)` or `enqueue_flow(conn,
    Flow(...))`. A child may be a Flow itself, to any depth: its parent waits for its own children,
    runs, and counts as one finished child of the enclosing parent. The parent runs once every child
    completed (`ctx.children_results()` gives their results). A dead or cancelled child fails the
    parent (`"fail"`), is ignored (`"ignore"`: the parent runs once the others finished), or lets
    the parent run at once (`"continue"`: `ctx.children_failures()` reports it); a child's own
    policy wins over its parent's. The flow is written whole or not at all: in a transaction of its
    own, a savepoint when `conn` is already in one (a pool: on a connection of its own).
    """
    flow = parent if isinstance(parent, Flow) else Flow(parent, children, on_child_dead)
    if isinstance(parent, Flow) and children:
        raise InvalidJobError("give the children in the Flow, not beside it")
    _validate_flow(flow, max_payload_bytes, depth=0)
    # Whole or not at all: a transaction of its own (a savepoint inside the caller's), so a child
    # refused half-way (QueueFullError) cannot leave a parent waiting for children never written.
    if isinstance(conn, asyncpg.Pool):
        async with conn.acquire() as own, own.transaction():
            return await _write_flow(own, flow, parent_id=None)
    async with conn.transaction():
        return await _write_flow(conn, flow, parent_id=None)


FLOW_DEPTH_MAX = 32


def _validate_flow(flow: Flow, max_payload_bytes: int, *, depth: int) -> None:
    if depth > FLOW_DEPTH_MAX:
        raise InvalidJobError(f"a flow may nest at most {FLOW_DEPTH_MAX} levels deep")
    if not 1 <= len(flow.children) <= FLOW_CHILDREN_MAX:
        raise InvalidJobError(f"a flow needs 1 to {FLOW_CHILDREN_MAX} children, got {len(flow.children)}")
    for policy in (flow.on_child_dead, flow.on_dead):
        if policy is not None and policy not in CHILD_POLICIES:
            raise InvalidJobError(f"a child policy must be one of {CHILD_POLICIES}, got {policy!r}")
    _validate_new(flow.parent, max_payload_bytes)
    for child in flow.children:
        if isinstance(child, Flow):
            _validate_flow(child, max_payload_bytes, depth=depth + 1)
        else:
            _validate_new(child, max_payload_bytes)
            if child.on_dead is not None and child.on_dead not in CHILD_POLICIES:
                raise InvalidJobError(
                    f"a child policy must be one of {CHILD_POLICIES}, got {child.on_dead!r}"
                )


def _validate_new(job: NewJob, max_payload_bytes: int) -> None:
    validate_job(
        job.kind, job.queue, payload_json(job.payload), job.priority, job.max_attempts, job.timeout_ms,
        max_payload_bytes,
    )  # fmt: skip


async def _write_flow(conn: Conn, flow: Flow, *, parent_id: int | None) -> tuple[int, list[int]]:
    parent_result = await _insert_new(
        conn, flow.parent, parent_id=parent_id, state=JobState.WAITING_CHILDREN, pending=len(flow.children),
        on_child_dead=flow.on_child_dead, parent_policy=flow.on_dead,
    )  # fmt: skip
    child_ids: list[int] = []
    for child in flow.children:
        if isinstance(child, Flow):
            sub_id, _ = await _write_flow(conn, child, parent_id=parent_result.id)
            child_ids.append(sub_id)
        else:
            written = await _insert_new(conn, child, parent_id=parent_result.id, parent_policy=child.on_dead)
            child_ids.append(written.id)
    return parent_result.id, child_ids


async def _insert_new(
    conn: Conn,
    job: NewJob,
    *,
    parent_id: int | None = None,
    state: JobState | None = None,
    pending: int = 0,
    on_child_dead: ChildPolicy = "fail",
    parent_policy: ChildPolicy | None = None,
) -> EnqueueResult:
    return await _insert(
        conn, job.kind, payload_json(job.payload), queue=job.queue, priority=job.priority, run_at=job.run_at,
        delay_ms=None, max_attempts=job.max_attempts, backoff=job.backoff, unique_key=None,
        timeout_ms=job.timeout_ms, parent_id=parent_id, state=state, pending_children=pending,
        on_child_dead=on_child_dead, parent_policy=parent_policy,
    )  # fmt: skip
