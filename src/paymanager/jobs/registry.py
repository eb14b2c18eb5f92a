"""Handlers by job kind, with per-kind defaults (queue, attempts, backoff, timeout)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from paymanager.db.pool import Conn
from paymanager.jobs.backoff import Backoff, Exponential, Fixed, Schedule
from paymanager.jobs.enqueue import EnqueueResult, enqueue
from paymanager.jobs.options import ATTEMPTS_MAX, NAME_PATTERN, QUEUE_PATTERN

if TYPE_CHECKING:
    from paymanager.jobs.context import JobContext

AsyncHandler = Callable[["JobContext"], Awaitable[Any]]
SyncHandler = Callable[["JobContext"], Any]
Handler = AsyncHandler | SyncHandler
BackoffStrategy = Schedule | Exponential | Fixed


@dataclass(frozen=True, slots=True)
class HandlerSpec:
    kind: str
    handler: Handler
    is_async: bool
    queue: str
    max_attempts: int | None
    backoff: BackoffStrategy | None
    timeout_ms: int | None


class Registry:
    """`kind -> handler`. A kind is registered once; registering it twice is a programmer error."""

    def __init__(self) -> None:
        self._specs: dict[str, HandlerSpec] = {}

    def register(
        self,
        kind: str,
        handler: Handler,
        *,
        queue: str = "default",
        max_attempts: int | None = None,
        backoff: BackoffStrategy | None = None,
        timeout_ms: int | None = None,
    ) -> HandlerSpec:
        if kind in self._specs:
            raise ValueError(f"job kind {kind!r} is registered already")
        if not NAME_PATTERN.match(kind):
            raise ValueError(f"job kind {kind!r} must match {NAME_PATTERN.pattern}")
        if not QUEUE_PATTERN.match(queue):
            raise ValueError(f"queue {queue!r} must match {QUEUE_PATTERN.pattern}")
        if max_attempts is not None and not 1 <= max_attempts <= ATTEMPTS_MAX:
            raise ValueError(f"max_attempts must be within [1, {ATTEMPTS_MAX}]")
        if timeout_ms is not None and not 1 <= timeout_ms <= 86_400_000:
            raise ValueError("timeout_ms must be within [1, 86400000]")
        spec = HandlerSpec(
            kind=kind,
            handler=handler,
            is_async=inspect.iscoroutinefunction(handler),
            queue=queue,
            max_attempts=max_attempts,
            backoff=backoff,
            timeout_ms=timeout_ms,
        )
        self._specs[kind] = spec
        return spec

    def handler(
        self,
        kind: str,
        *,
        queue: str = "default",
        max_attempts: int | None = None,
        backoff: BackoffStrategy | None = None,
        timeout_ms: int | None = None,
    ) -> Callable[[Handler], Handler]:
        """Decorator form of `register`."""

        def decorate(func: Handler) -> Handler:
            self.register(
                kind, func, queue=queue, max_attempts=max_attempts, backoff=backoff, timeout_ms=timeout_ms
            )
            return func

        return decorate

    def get(self, kind: str) -> HandlerSpec | None:
        return self._specs.get(kind)

    def __contains__(self, kind: object) -> bool:
        return kind in self._specs

    def __iter__(self) -> Iterator[HandlerSpec]:
        return iter(self._specs.values())

    def queues(self) -> set[str]:
        return {spec.queue for spec in self._specs.values()}

    async def enqueue(
        self,
        conn: Conn,
        kind: str,
        payload: dict[str, Any],
        *,
        priority: int = 0,
        run_at: datetime | None = None,
        delay_ms: int | None = None,
        unique_key: str | None = None,
        parent_id: int | None = None,
        queue: str | None = None,
        max_attempts: int | None = None,
        backoff: Backoff | None = None,
        timeout_ms: int | None = None,
    ) -> EnqueueResult:
        """`enqueue` with the kind's registered queue (and its defaults written on the row)."""
        spec = self._specs.get(kind)
        if spec is None:
            raise ValueError(f"job kind {kind!r} is not registered")
        return await enqueue(
            conn, kind, payload, queue=queue or spec.queue, priority=priority, run_at=run_at,
            delay_ms=delay_ms, max_attempts=max_attempts if max_attempts is not None else spec.max_attempts,
            backoff=backoff if backoff is not None else spec.backoff, unique_key=unique_key,
            timeout_ms=timeout_ms if timeout_ms is not None else spec.timeout_ms, parent_id=parent_id,
        )  # fmt: skip
