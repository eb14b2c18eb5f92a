"""Lifecycle events (completed, failed, retrying, dead, stalled, progress, cancelled, snoozed,
active, waiting, removed, drained; docs/state_machines.md, "Events", says who publishes each).

Published with PostgreSQL NOTIFY on channel `pm_job_events` (and on Redis pub/sub channel
`pm:job_events` when a Redis URL is given). A NOTIFY payload is limited to 8000 bytes, so events are
sent in chunks of up to EVENTS_PER_MESSAGE; `subscribe` flattens them into single `JobEvent`s.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
import orjson

from paymanager.db.database import Database, listener_of
from paymanager.db.listener import Subscription
from paymanager.db.pool import Pool
from paymanager.jobs._queries import CHANNEL_EVENTS
from paymanager.jobs._store import outcome, publish_events
from paymanager.jobs.states import JobState
from paymanager.logging import get_logger

log = get_logger("paymanager.jobs.events")

EVENT_NAMES = frozenset(
    {"completed", "failed", "retrying", "dead", "stalled", "progress", "cancelled", "snoozed",
     "active", "waiting", "removed", "drained"}
)  # fmt: skip
REDIS_CHANNEL = "pm:job_events"
# Each event is about 80 bytes of JSON; 60 keep a message well under NOTIFY's 8000-byte limit.
EVENTS_PER_MESSAGE = 60
# PostgreSQL refuses a NOTIFY payload of 8000 bytes or more: a message is cut by size as well (60
# events with errors of 300 characters were 22 kB, and a whole flush of failures was lost).
NOTIFY_BYTES_MAX = 7_900
ERROR_CHARS_MAX = 300
SUBSCRIBER_BUFFER_MAX = 10_000


@dataclass(frozen=True, slots=True)
class JobEvent:
    event: str
    id: int
    kind: str
    queue: str
    attempt: int | None = None
    progress: float | None = None
    error: str | None = None
    # `drained`: how many jobs were removed (its id is 0 and its kind empty: it is about a queue).
    count: int | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"e": self.event, "id": self.id, "k": self.kind, "q": self.queue}
        if self.attempt is not None:
            data["a"] = self.attempt
        if self.progress is not None:
            data["p"] = self.progress
        if self.error is not None:
            data["err"] = self.error[:ERROR_CHARS_MAX]
        if self.count is not None:
            data["n"] = self.count
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> JobEvent:
        return cls(
            event=str(data["e"]),
            id=int(data["id"]),
            kind=str(data["k"]),
            queue=str(data["q"]),
            attempt=data.get("a"),
            progress=data.get("p"),
            error=data.get("err"),
            count=data.get("n"),
        )


@dataclass(frozen=True, slots=True)
class DeadJob:
    """What the on-dead hook receives: the job and its last error."""

    id: int
    kind: str
    queue: str
    error: dict[str, Any] | None
    # The attempts it had (None where the caller does not know them).
    attempt: int | None = None


DeadHook = Callable[[DeadJob], Awaitable[None]]
# A worker's `error` event (BullMQ's worker "error"): what failed ("claim", "outcomes",
# "heartbeat", "promote") and the exception. Called in the worker's loop, so it must not block;
# what it raises is logged and ignored.
ErrorHook = Callable[[str, BaseException], None]


def report_error(hook: ErrorHook | None, where: str, exc: BaseException) -> None:
    if hook is None:
        return
    try:
        hook(where, exc)
    except Exception as failure:  # the hook is the caller's code: it must not stop the worker
        log.error("error hook failed", where=where, error=repr(failure))


class EventPublisher:
    """Sends events after the state change they describe has committed."""

    def __init__(self, pool: Pool, redis_url: str | None = None, *, notify_completed: bool = True) -> None:
        self._pool = pool
        # `completed` events are NOTIFYed by the completing statement itself (one per chunk of jobs,
        # no extra round trip); this flag is passed to it. Turning it off saves the NOTIFYs.
        self.notify_completed = notify_completed
        self._redis_url = redis_url
        self._redis: Any = None

    @property
    def has_redis(self) -> bool:
        return self._redis_url is not None

    async def start(self) -> None:
        if self._redis_url:
            import redis.asyncio as aioredis

            self._redis = aioredis.from_url(self._redis_url)

    async def close(self) -> None:
        if self._redis is not None:
            with contextlib.suppress(Exception):
                await self._redis.aclose()
            self._redis = None

    async def publish(
        self, events: Sequence[JobEvent], *, notify: bool = True, notify_completed: bool | None = None
    ) -> None:
        """Best effort: an event lost to a broken connection must not fail the job it describes.

        `notify=False` sends to Redis only (the NOTIFY went out with the statement that wrote the
        change); `notify_completed=False` does the same for `completed` events only, and by default
        follows this publisher's setting (`WorkerOptions.notify_completed_events`).
        """
        if notify_completed is None:
            notify_completed = self.notify_completed
        if not notify_completed:
            redis_only = [e for e in events if e.event == "completed"]
            events = [e for e in events if e.event != "completed"]
            if redis_only:
                await self.publish(redis_only, notify=False)
        if not notify and self._redis is None:
            return
        for message in event_messages(events):
            if notify:
                try:
                    await publish_events(self._pool, channel=CHANNEL_EVENTS, message=message)
                except (asyncpg.PostgresError, OSError, asyncpg.InterfaceError) as exc:
                    log.warning("job events not published", error=str(exc), count=len(events))
            if self._redis is not None:
                try:
                    await self._redis.publish(REDIS_CHANNEL, message)
                except Exception as exc:  # a Redis error must not break the worker either
                    log.warning("job events not published to redis", error=repr(exc))


def event_messages(events: Sequence[JobEvent]) -> list[str]:
    """JSON arrays of at most EVENTS_PER_MESSAGE events and NOTIFY_BYTES_MAX bytes each."""
    messages: list[str] = []
    chunk: list[bytes] = []
    size = 2
    for event in events:
        item = orjson.dumps(event.to_json())
        if chunk and (len(chunk) == EVENTS_PER_MESSAGE or size + len(item) + 1 > NOTIFY_BYTES_MAX):
            messages.append((b"[" + b",".join(chunk) + b"]").decode())
            chunk, size = [], 2
        chunk.append(item)
        size += len(item) + 1
    if chunk:
        messages.append((b"[" + b",".join(chunk) + b"]").decode())
    return messages


def _decode(message: str | bytes) -> list[JobEvent]:
    try:
        return [JobEvent.from_json(item) for item in orjson.loads(message)]
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        log.warning("malformed job event message ignored")
        return []


class EventStream:
    """Job events received by another process: `async with EventStream(database) as events:` then
    `async for event in events` (PostgreSQL NOTIFY, through the Database's LISTEN connection), or
    `EventStream(redis_url=...)` (Redis pub/sub).

    Listening has begun when `__aenter__` returns. A subscriber that falls behind by
    SUBSCRIBER_BUFFER_MAX events loses the oldest ones rather than growing without bound.
    """

    def __init__(self, database: Database | str | None = None, *, redis_url: str | None = None) -> None:
        if (database is None) == (redis_url is None):
            raise ValueError("give exactly one of database and redis_url")
        self._listener = listener_of(database) if database is not None else None
        self._subscription = Subscription({CHANNEL_EVENTS: self._push})
        self._redis_url = redis_url
        self._queue: asyncio.Queue[JobEvent] = asyncio.Queue(SUBSCRIBER_BUFFER_MAX)
        self._redis: Any = None
        self._reader: asyncio.Task[None] | None = None

    def _push(self, message: str | bytes) -> None:
        for event in _decode(message):
            if self._queue.full():
                self._queue.get_nowait()
            self._queue.put_nowait(event)

    async def __aenter__(self) -> EventStream:
        if self._listener is not None:
            await self._listener.subscribe(self._subscription)
        else:
            import redis.asyncio as aioredis

            assert self._redis_url is not None
            self._redis = aioredis.from_url(self._redis_url)
            pubsub = self._redis.pubsub()
            await pubsub.subscribe(REDIS_CHANNEL)
            self._reader = asyncio.create_task(self._read_redis(pubsub))
        return self

    async def _read_redis(self, pubsub: Any) -> None:
        try:
            async for message in pubsub.listen():
                if message.get("type") == "message":
                    self._push(message["data"])
        finally:
            with contextlib.suppress(Exception):
                await pubsub.aclose()

    async def __aexit__(self, *exc: object) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader
        if self._redis is not None:
            with contextlib.suppress(Exception):
                await self._redis.aclose()
        if self._listener is not None:
            with contextlib.suppress(Exception):
                await self._listener.unsubscribe(self._subscription)

    def __aiter__(self) -> AsyncIterator[JobEvent]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[JobEvent]:
        while True:
            yield await self._queue.get()

    async def next(self, timeout_s: float) -> JobEvent:
        return await asyncio.wait_for(self._queue.get(), timeout_s)

    async def next_event(self) -> JobEvent:
        return await self._queue.get()


FINISHED = frozenset({JobState.COMPLETED, JobState.DEAD, JobState.CANCELLED})
_FINISHED_EVENTS = frozenset(state.value for state in FINISHED)
# wait_until_finished reads the job again at least this often: a `completed` event may be turned
# off (WorkerOptions.notify_completed_events) or lost with a LISTEN connection.
FINISHED_POLL_S = 1.0


@dataclass(frozen=True, slots=True)
class FinishedJob:
    id: int
    state: JobState
    result: Any
    error: dict[str, Any] | None


async def wait_until_finished(
    database: Database, job_id: int, timeout_s: float, *, poll_interval_s: float = FINISHED_POLL_S
) -> FinishedJob:
    """Wait until job `job_id` is completed, dead or cancelled; returns how it ended. Raises
    TimeoutError after `timeout_s`, LookupError when the job does not exist (or was removed).

    Woken by the job's events (NOTIFY on the Database's LISTEN connection), and reads the row
    again every `poll_interval_s` whatever happens, so a lost or disabled event only delays it.
    """
    async with asyncio.timeout(timeout_s), EventStream(database) as events:
        while True:
            found = await outcome(database.pool, job_id=job_id)
            if found is None:
                raise LookupError(f"job {job_id} does not exist")
            if found.state in FINISHED:
                return FinishedJob(job_id, found.state, found.result, found.last_error)
            deadline = asyncio.get_running_loop().time() + poll_interval_s
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout_at(deadline):
                    while True:
                        event = await events.next_event()
                        if event.id == job_id and event.event in _FINISHED_EVENTS:
                            break
