"""Per-service request rate limits of one api process: a token bucket per service.

Each api process keeps its own buckets (no shared state, so a check costs a dict lookup and a few
float operations, not a round trip); with N api replicas behind a balancer a service gets up to N
times its limit, which the operator divides when setting it. Why not a library: the limiters on PyPI
either wrap a shared store (Redis, a database) the request path must not wait on, or are built for
decorating functions rather than keying per caller with a per-caller rate.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

BUCKETS_MAX = 10_000


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated: float


class ServiceRateLimiter:
    def __init__(self, default_per_sec: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.default_per_sec = default_per_sec
        self.clock = clock
        self._buckets: dict[str, _Bucket] = {}

    def take(self, service_id: str, per_sec: int | None) -> float | None:
        """Spend one request of the service's budget; None when allowed, else the seconds until the
        next request would be. `per_sec` is the service's own limit (None: the default; 0: none)."""
        rate = per_sec if per_sec is not None else self.default_per_sec
        if rate <= 0:
            return None
        now = self.clock()
        bucket = self._buckets.get(service_id)
        if bucket is None:
            if len(self._buckets) >= BUCKETS_MAX:
                self._buckets.clear()
            bucket = self._buckets[service_id] = _Bucket(float(rate), now)
        # One second of burst: the bucket holds at most `rate` tokens.
        bucket.tokens = min(float(rate), bucket.tokens + (now - bucket.updated) * rate)
        bucket.updated = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return None
        return (1.0 - bucket.tokens) / rate


def retry_after_header(wait_sec: float) -> str:
    """Retry-After is whole seconds; round up so a client that obeys it is never refused again."""
    return str(max(1, math.ceil(wait_sec)))
