"""The PSP step's Prometheus series: payouts the worker ended, by PSP and outcome, and the latency and
failures of each call to a PSP, by PSP and operation.

Labels are bounded: `psp` is one of the configured PSP names, `operation` one of OPERATIONS, `state`
one of the PSP transaction's outcome states, `reason` one of the failure kinds below."""

from __future__ import annotations

import time
from collections.abc import Awaitable
from typing import Literal, TypeVar

from prometheus_client import Counter, Histogram

from paymanager.adapters.psp.port import PspRateLimitedError, PspUnavailableError

T = TypeVar("T")

Operation = Literal["query", "transfer", "inquire", "partner_balance"]
OPERATIONS: tuple[Operation, ...] = ("query", "transfer", "inquire", "partner_balance")

# From a sandbox's few milliseconds to a PSP's timeout (PSP configurations allow up to a minute).
CALL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

PAYOUTS = Counter(
    "paymanager_psp_payouts_total",
    "Payouts the psp-worker ended or sent to manual review, by PSP and state "
    "(COMPLETED, FAILED, MANUAL_REVIEW); resolutions by hand are in the admin audit.",
    ["psp", "state"],
)
CALL_SECONDS = Histogram(
    "paymanager_psp_call_seconds",
    "How long each call to a PSP took, answered or not, by PSP and operation.",
    ["psp", "operation"],
    buckets=CALL_BUCKETS,
)
CALL_FAILURES = Counter(
    "paymanager_psp_call_failures_total",
    "PSP calls without a usable answer, by PSP, operation and reason "
    "(rate_limited: a 429; unavailable: a timeout, refused connection or 5xx; error: any other).",
    ["psp", "operation", "reason"],
)


async def timed(psp: str, operation: Operation, call: Awaitable[T]) -> T:
    """Await a PSP call, observing its duration and, when it raises, why."""
    started = time.perf_counter()
    try:
        return await call
    except PspRateLimitedError:
        CALL_FAILURES.labels(psp, operation, "rate_limited").inc()
        raise
    except PspUnavailableError:
        CALL_FAILURES.labels(psp, operation, "unavailable").inc()
        raise
    except Exception:
        CALL_FAILURES.labels(psp, operation, "error").inc()
        raise
    finally:
        CALL_SECONDS.labels(psp, operation).observe(time.perf_counter() - started)
