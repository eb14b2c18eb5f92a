"""Typed errors of the job engine: what a handler raises on purpose, and what enqueue refuses."""

from __future__ import annotations


class JobError(Exception):
    """Base of the engine's own errors."""


class PermanentError(JobError):
    """Raised by a handler when retrying cannot help: the job goes straight to `dead`."""


class LeaseLostError(JobError):
    """The job's lease moved on (it was rescued and claimed again): this claim may not complete it."""

    def __init__(self, job_id: int) -> None:
        self.job_id = job_id
        super().__init__(f"job {job_id} is no longer held by this claim; its effects were rolled back")


# The longest pause a RateLimitedError may ask for; a longer retry-after is cut to it.
RATE_LIMITED_PAUSE_MS_MAX = 86_400_000


class RateLimitedError(JobError):
    """Raised by a handler when its partner refused for a while (an HTTP 429 and its Retry-After).

    The job goes back to `available` without spending an attempt, keeping its place in the queue,
    and no process starts a job of its queue for `retry_after_ms` (cut to RATE_LIMITED_PAUSE_MS_MAX).
    """

    def __init__(self, retry_after_ms: int, message: str = "") -> None:
        if retry_after_ms < 0:
            raise ValueError(f"retry_after_ms must be >= 0, got {retry_after_ms}")
        self.retry_after_ms = min(int(retry_after_ms), RATE_LIMITED_PAUSE_MS_MAX)
        super().__init__(message or f"rate limited; retry after {self.retry_after_ms} ms")


class JobCancelledError(JobError):
    """Raised by a handler (or `ctx.raise_if_cancelled()`) once its job was cancelled."""


class EnqueueError(JobError):
    """A job was refused at enqueue."""


class QueueFullError(EnqueueError):
    def __init__(self, queue: str) -> None:
        self.queue = queue
        super().__init__(
            f"queue {queue!r} is at its maximum depth; retry later or raise it with "
            f"`paymanager jobs max-depth {queue} N`"
        )


class PayloadTooLargeError(EnqueueError):
    def __init__(self, size_bytes: int, limit_bytes: int) -> None:
        self.size_bytes = size_bytes
        self.limit_bytes = limit_bytes
        super().__init__(f"job payload is {size_bytes} bytes; the limit is {limit_bytes}")


class InvalidJobError(EnqueueError):
    """A job's fields break a rule (name pattern, priority range, conflicting options)."""


CODEC_HINT = (
    "create the pool with paymanager.db.pool.create_pool, or pass init=paymanager.db.pool.init_connection "
    "to asyncpg.create_pool / call it on a connection"
)


class CodecError(JobError):
    """The connection lacks the JSON codecs the engine's statements need (a plain asyncpg pool or
    connection): payloads would travel as text."""

    def __init__(self, what: str) -> None:
        super().__init__(f"{what}: {CODEC_HINT}")
