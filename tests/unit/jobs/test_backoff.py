from __future__ import annotations

import random
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from paymanager.jobs import OUTBOX_SCHEDULE, Exponential, Fixed, JobCancelledError, PermanentError, Schedule
from paymanager.jobs._outcomes import decide_failure, snooze
from paymanager.jobs.backoff import DELAY_MS_MAX, backoff_from_json
from paymanager.jobs.states import JobState

MIN = 60_000
HOUR = 60 * MIN


def test_outbox_schedule_is_the_source_documents_schedule_then_24h() -> None:
    delays = [OUTBOX_SCHEDULE.delay_ms(attempt) for attempt in range(1, 10)]
    assert delays == [MIN, 5 * MIN, 30 * MIN, 2 * HOUR, 12 * HOUR, 24 * HOUR, 24 * HOUR, 24 * HOUR, 24 * HOUR]


def test_exponential_doubles_from_base_and_stops_at_cap() -> None:
    strategy = Exponential(1_000, 10_000)
    assert [strategy.delay_ms(n) for n in range(1, 7)] == [1_000, 2_000, 4_000, 8_000, 10_000, 10_000]


@given(
    base=st.integers(1, 10_000),
    extra=st.integers(0, 10_000_000),
    attempt=st.integers(1, 10_000),
    jitter=st.floats(0, 1),
    seed=st.integers(0, 2**32),
)
def test_exponential_delay_stays_within_jittered_cap(
    base: int, extra: int, attempt: int, jitter: float, seed: int
) -> None:
    strategy = Exponential(base, base + extra, jitter)
    delay = strategy.delay_ms(attempt, random.Random(seed))
    assert 0 <= delay <= min(DELAY_MS_MAX, round((base + extra) * (1 + jitter)) + 1)


@given(delay=st.integers(0, DELAY_MS_MAX), jitter=st.floats(0, 1), attempt=st.integers(1, 100))
def test_fixed_jitter_spreads_around_the_delay(delay: int, jitter: float, attempt: int) -> None:
    value = Fixed(delay, jitter).delay_ms(attempt, random.Random(attempt))
    assert delay * (1 - jitter) - 1 <= value <= min(DELAY_MS_MAX, delay * (1 + jitter) + 1)


@given(
    strategy=st.one_of(
        st.builds(Schedule, st.lists(st.integers(0, DELAY_MS_MAX), min_size=1, max_size=8), st.floats(0, 1)),
        st.builds(
            lambda b, e, j: Exponential(b, b + e, j),
            st.integers(1, 1000),
            st.integers(0, 10**6),
            st.floats(0, 1),
        ),
        st.builds(Fixed, st.integers(0, DELAY_MS_MAX), st.floats(0, 1)),
    )
)
def test_strategy_survives_its_json_round_trip(strategy: Schedule | Exponential | Fixed) -> None:
    assert backoff_from_json(strategy.to_json()) == strategy


def test_invalid_strategies_are_refused() -> None:
    with pytest.raises(ValueError):
        Schedule([])
    with pytest.raises(ValueError):
        Exponential(10, 5)
    with pytest.raises(ValueError):
        Fixed(-1)
    with pytest.raises(ValueError):
        Fixed(10, jitter=2)


@given(attempt=st.integers(1, 50), max_attempts=st.integers(1, 50))
def test_failure_is_retryable_until_the_last_attempt(attempt: int, max_attempts: int) -> None:
    attempt = min(attempt, max_attempts)
    failure = decide_failure(
        1, uuid.uuid4(), RuntimeError("x"), attempt=attempt, max_attempts=max_attempts,
        backoff=Fixed(5), cancel_requested=False,
    )  # fmt: skip
    expected = JobState.DEAD if attempt >= max_attempts else JobState.RETRYABLE
    assert failure.state is expected
    assert failure.spent


def test_permanent_error_and_cancellation_skip_retries() -> None:
    token = uuid.uuid4()
    permanent = decide_failure(
        1, token, PermanentError("no"), attempt=1, max_attempts=9, backoff=Fixed(5), cancel_requested=False
    )
    cancelled = decide_failure(
        1,
        token,
        JobCancelledError("stop"),
        attempt=1,
        max_attempts=9,
        backoff=Fixed(5),
        cancel_requested=False,
    )
    assert (permanent.state, cancelled.state) == (JobState.DEAD, JobState.CANCELLED)


def test_snooze_gives_the_attempt_back() -> None:
    assert not snooze(1, uuid.uuid4(), 1000).spent
    assert snooze(1, uuid.uuid4(), 1000).state is JobState.SCHEDULED
