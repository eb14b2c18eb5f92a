"""The per-service token bucket of the API, on a stopped clock."""

from __future__ import annotations

from paymanager.api.rate_limit import ServiceRateLimiter, retry_after_header


class StoppedClock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def test_the_bucket_refills_at_the_rate_and_holds_one_second_of_burst() -> None:
    clock = StoppedClock()
    limiter = ServiceRateLimiter(10, clock=clock)
    assert all(limiter.take("svc", None) is None for _ in range(10))
    wait = limiter.take("svc", None)
    assert wait is not None
    assert abs(wait - 0.1) < 1e-9
    clock.now += 60  # idle for a minute: still only one second of burst
    assert all(limiter.take("svc", None) is None for _ in range(10))
    assert limiter.take("svc", None) is not None


def test_a_service_limit_of_its_own_wins_over_the_default_and_zero_means_none() -> None:
    clock = StoppedClock()
    limiter = ServiceRateLimiter(0, clock=clock)
    assert all(limiter.take("svc", None) is None for _ in range(1_000))
    assert limiter.take("svc", 1) is None
    assert limiter.take("svc", 1) is not None


def test_retry_after_rounds_up_to_whole_seconds() -> None:
    assert retry_after_header(0.01) == "1"
    assert retry_after_header(1.0) == "1"
    assert retry_after_header(1.2) == "2"
