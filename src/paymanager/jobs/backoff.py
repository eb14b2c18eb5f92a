"""Retry delays: a fixed schedule, exponential and fixed strategies, each with optional jitter.

A strategy is a frozen dataclass that also serialises to JSON, so a job can carry its own strategy
in its row (`job.backoff`) and any worker computes the same delays.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
# The longest delay any strategy may produce: one week.
DELAY_MS_MAX = 7 * 24 * HOUR_MS


class Backoff(Protocol):
    def delay_ms(self, attempt: int) -> int:
        """Delay before the attempt after `attempt` (1-based: the attempt that just failed)."""
        ...

    def to_json(self) -> dict[str, Any]: ...


def _jittered(delay_ms: int, jitter: float, rng: random.Random | None) -> int:
    if jitter <= 0:
        return delay_ms
    source = rng if rng is not None else random
    spread = delay_ms * jitter
    return max(0, min(DELAY_MS_MAX, round(delay_ms + source.uniform(-spread, spread))))


def _check_jitter(jitter: float) -> None:
    if not 0 <= jitter <= 1:
        raise ValueError(f"jitter must be within [0, 1], got {jitter}")


@dataclass(frozen=True, slots=True)
class Schedule:
    """Delays taken in order; past the end, the last one repeats."""

    delays_ms: tuple[int, ...]
    jitter: float = 0.0

    def __init__(self, delays_ms: Sequence[int], jitter: float = 0.0) -> None:
        if not delays_ms:
            raise ValueError("a schedule needs at least one delay")
        if any(d < 0 or d > DELAY_MS_MAX for d in delays_ms):
            raise ValueError(f"schedule delays must be within [0, {DELAY_MS_MAX}] ms")
        _check_jitter(jitter)
        object.__setattr__(self, "delays_ms", tuple(delays_ms))
        object.__setattr__(self, "jitter", jitter)

    def delay_ms(self, attempt: int, rng: random.Random | None = None) -> int:
        index = min(max(attempt, 1), len(self.delays_ms)) - 1
        return _jittered(self.delays_ms[index], self.jitter, rng)

    def to_json(self) -> dict[str, Any]:
        return {"type": "schedule", "delays_ms": list(self.delays_ms), "jitter": self.jitter}


@dataclass(frozen=True, slots=True)
class Exponential:
    """base x 2^(attempt-1), capped."""

    base_ms: int
    cap_ms: int
    jitter: float = 0.0

    def __post_init__(self) -> None:
        if not 0 < self.base_ms <= self.cap_ms <= DELAY_MS_MAX:
            raise ValueError(f"need 0 < base_ms <= cap_ms <= {DELAY_MS_MAX}")
        _check_jitter(self.jitter)

    def delay_ms(self, attempt: int, rng: random.Random | None = None) -> int:
        # Past 2^40 the cap has long been reached; bounding the exponent keeps the integer small.
        exponent = min(max(attempt, 1) - 1, 40)
        return _jittered(min(self.cap_ms, self.base_ms * 2**exponent), self.jitter, rng)

    def to_json(self) -> dict[str, Any]:
        return {"type": "exponential", "base_ms": self.base_ms, "cap_ms": self.cap_ms, "jitter": self.jitter}


@dataclass(frozen=True, slots=True)
class Fixed:
    """The same delay before every retry (stored as `fixed_ms`: `delay_ms` is the method)."""

    fixed_ms: int
    jitter: float = 0.0

    def __init__(self, delay_ms: int, jitter: float = 0.0) -> None:
        if not 0 <= delay_ms <= DELAY_MS_MAX:
            raise ValueError(f"delay_ms must be within [0, {DELAY_MS_MAX}]")
        _check_jitter(jitter)
        object.__setattr__(self, "fixed_ms", delay_ms)
        object.__setattr__(self, "jitter", jitter)

    def delay_ms(self, attempt: int, rng: random.Random | None = None) -> int:
        del attempt
        return _jittered(self.fixed_ms, self.jitter, rng)

    def to_json(self) -> dict[str, Any]:
        return {"type": "fixed", "delay_ms": self.fixed_ms, "jitter": self.jitter}


def backoff_from_json(data: dict[str, Any]) -> Schedule | Exponential | Fixed:
    """The strategy a job row carries; an unknown type is a programmer error (we wrote the row)."""
    kind = data.get("type")
    jitter = float(data.get("jitter", 0.0))
    if kind == "schedule":
        return Schedule([int(d) for d in data["delays_ms"]], jitter)
    if kind == "exponential":
        return Exponential(int(data["base_ms"]), int(data["cap_ms"]), jitter)
    if kind == "fixed":
        return Fixed(int(data["delay_ms"]), jitter)
    raise ValueError(f"unknown backoff type {kind!r}")


# The source documents' outbox schedule: 1 min, 5 min, 30 min, 2 h, 12 h, 24 h, then 24 h.
OUTBOX_SCHEDULE = Schedule(
    [MINUTE_MS, 5 * MINUTE_MS, 30 * MINUTE_MS, 2 * HOUR_MS, 12 * HOUR_MS, 24 * HOUR_MS]
)
# The engine's default for kinds that name none: exponential from 1 s, capped at 1 h, 10% jitter.
DEFAULT_BACKOFF = Exponential(1_000, HOUR_MS, 0.1)
