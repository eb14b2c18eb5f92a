"""Handlers by job kind, with per-kind defaults (queue, attempts, backoff, timeout) and, for a
typed kind, the pydantic models of its payload and its result."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from paymanager.db.pool import Conn
from paymanager.jobs.backoff import Backoff, Exponential, Fixed, Schedule
from paymanager.jobs.enqueue import Dedup, EnqueueResult, enqueue
from paymanager.jobs.errors import InvalidJobError, PermanentError
from paymanager.jobs.options import ATTEMPTS_MAX, NAME_PATTERN, QUEUE_PATTERN

if TYPE_CHECKING:
    from paymanager.jobs.context import JobContext

# A plain kind's handler takes the context; a typed kind's (payload_model) takes the payload as
# its model, then the context.
AsyncHandler = Callable[["JobContext"], Awaitable[Any]] | Callable[[Any, "JobContext"], Awaitable[Any]]
SyncHandler = Callable[["JobContext"], Any] | Callable[[Any, "JobContext"], Any]
Handler = AsyncHandler | SyncHandler
BackoffStrategy = Schedule | Exponential | Fixed
ERRORS_SHOWN_MAX = 5


def _explain(error: ValidationError) -> str:
    """A pydantic error in one line: where and what, for the first few problems."""
    parts = [
        f"{'.'.join(str(p) for p in e['loc']) or '(payload)'}: {e['msg']}"
        for e in error.errors()[:ERRORS_SHOWN_MAX]
    ]
    more = error.error_count() - ERRORS_SHOWN_MAX
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


@dataclass(frozen=True, slots=True)
class HandlerSpec:
    kind: str
    # `Handler`: called with the context, or (typed) with the payload's model and the context.
    handler: Callable[..., Any]
    is_async: bool
    queue: str
    max_attempts: int | None
    backoff: BackoffStrategy | None
    timeout_ms: int | None
    payload_model: type[BaseModel] | None = None
    result_model: type[BaseModel] | None = None
    # An async handler of an untyped kind: the executor awaits it directly (set from the above).
    is_plain_async: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        plain = self.is_async and self.payload_model is None and self.result_model is None
        object.__setattr__(self, "is_plain_async", plain)

    def payload_of(self, payload: dict[str, Any] | BaseModel) -> dict[str, Any]:
        """The payload to store: validated by the kind's model (InvalidJobError, saying what is
        wrong, when it does not fit), as its JSON form."""
        model = self.payload_model
        if model is None:
            return payload.model_dump(mode="json") if isinstance(payload, BaseModel) else payload
        if isinstance(payload, BaseModel) and not isinstance(payload, model):
            raise InvalidJobError(
                f"job kind {self.kind!r} takes a {model.__name__} payload, got {type(payload).__name__}"
            )
        try:
            value = payload if isinstance(payload, model) else model.model_validate(payload)
        except ValidationError as exc:
            raise InvalidJobError(f"payload of job kind {self.kind!r} is invalid: {_explain(exc)}") from None
        return value.model_dump(mode="json")

    def model_of(self, payload: dict[str, Any]) -> BaseModel:
        """A stored payload as the kind's model; PermanentError when it does not fit (written by
        a producer that did not validate it: running it again cannot help)."""
        assert self.payload_model is not None
        try:
            return self.payload_model.model_validate(payload)
        except ValidationError as exc:
            raise PermanentError(f"payload of job kind {self.kind!r} is invalid: {_explain(exc)}") from None

    def result_of(self, value: object) -> object:
        """A handler's return value as stored: checked against the kind's result model."""
        model = self.result_model
        if model is None or value is None:
            return value.model_dump(mode="json") if isinstance(value, BaseModel) else value
        try:
            checked = value if isinstance(value, model) else model.model_validate(value)
        except ValidationError as exc:
            raise PermanentError(f"result of job kind {self.kind!r} is invalid: {_explain(exc)}") from None
        return checked.model_dump(mode="json")

    def read_result(self, stored: object) -> object:
        """A stored result as the kind's result model (as stored when it has none)."""
        if self.result_model is None or stored is None:
            return stored
        return self.result_model.model_validate(stored)


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
        payload_model: type[BaseModel] | None = None,
        result_model: type[BaseModel] | None = None,
    ) -> HandlerSpec:
        """Register `handler` for `kind`. With `payload_model`, `Registry.enqueue` validates the
        payload against it and the handler is called as `handler(payload_as_model, ctx)`; with
        `result_model`, what the handler returns is checked against it before it is stored."""
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
            payload_model=payload_model,
            result_model=result_model,
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
        payload_model: type[BaseModel] | None = None,
        result_model: type[BaseModel] | None = None,
    ) -> Callable[[Handler], Handler]:
        """Decorator form of `register`."""

        def decorate(func: Handler) -> Handler:
            self.register(
                kind, func, queue=queue, max_attempts=max_attempts, backoff=backoff, timeout_ms=timeout_ms,
                payload_model=payload_model, result_model=result_model,
            )  # fmt: skip
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
        payload: dict[str, Any] | BaseModel,
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
        dedup: Dedup | None = None,
        lifo: bool = False,
    ) -> EnqueueResult:
        """`enqueue` with the kind's registered queue (and its defaults written on the row), its
        payload validated by the kind's model if it has one (InvalidJobError)."""
        spec = self._specs.get(kind)
        if spec is None:
            raise ValueError(f"job kind {kind!r} is not registered")
        return await enqueue(
            conn, kind, spec.payload_of(payload), queue=queue or spec.queue, dedup=dedup, lifo=lifo,
            priority=priority, run_at=run_at,
            delay_ms=delay_ms, max_attempts=max_attempts if max_attempts is not None else spec.max_attempts,
            backoff=backoff if backoff is not None else spec.backoff, unique_key=unique_key,
            timeout_ms=timeout_ms if timeout_ms is not None else spec.timeout_ms, parent_id=parent_id,
        )  # fmt: skip
