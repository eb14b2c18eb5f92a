"""What happened to a claimed job, decided in Python and written in batches by the completer."""

from __future__ import annotations

import traceback
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from paymanager.jobs.backoff import Exponential, Fixed, Schedule
from paymanager.jobs.errors import JobCancelledError, PermanentError
from paymanager.jobs.states import JobState

ERROR_CHARS_MAX = 2_000
TRACE_CHARS_MAX = 4_000


# Not frozen: one is made per job completed, and a frozen dataclass's __init__ sets each field through
# object.__setattr__.
@dataclass(slots=True)
class Completion:
    id: int
    token: uuid.UUID
    result: Any


@dataclass(frozen=True, slots=True)
class Failure:
    """A failed or snoozed attempt: the state to write, the delay before the next run, the error."""

    id: int
    token: uuid.UUID
    state: JobState
    delay_ms: int | None
    error: dict[str, Any] | None
    # False for a snooze: the attempt is given back.
    spent: bool


def error_record(exc: BaseException, attempt: int) -> dict[str, Any]:
    trace = "".join(traceback.format_exception(exc))
    return {
        "error": str(exc)[:ERROR_CHARS_MAX] or type(exc).__name__,
        "type": type(exc).__name__,
        "attempt": attempt,
        "at": datetime.now(UTC).isoformat(),
        "trace": trace[-TRACE_CHARS_MAX:],
    }


def decide_failure(
    job_id: int,
    token: uuid.UUID,
    exc: BaseException,
    *,
    attempt: int,
    max_attempts: int,
    backoff: Schedule | Exponential | Fixed,
    cancel_requested: bool,
) -> Failure:
    """Retry with backoff while attempts remain; a permanent error or the last attempt is dead; an
    error after (or because of) cancellation is cancelled."""
    error = error_record(exc, attempt)
    if isinstance(exc, JobCancelledError) or cancel_requested:
        return Failure(job_id, token, JobState.CANCELLED, None, error, True)
    if isinstance(exc, PermanentError) or attempt >= max_attempts:
        return Failure(job_id, token, JobState.DEAD, None, error, True)
    delay_ms = backoff.delay_ms(attempt)
    return Failure(job_id, token, JobState.RETRYABLE, delay_ms, error, True)


def snooze(job_id: int, token: uuid.UUID, delay_ms: int) -> Failure:
    state = JobState.SCHEDULED if delay_ms > 0 else JobState.AVAILABLE
    return Failure(job_id, token, state, delay_ms, None, False)
