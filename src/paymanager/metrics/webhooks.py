"""Merchant webhook deliveries' Prometheus series: attempts by result and their latency.

`result` is one of RESULTS: succeeded (a 2xx), retrying (failed, another attempt is scheduled),
dead (failed with no attempt left, or the endpoint has failed for WEBHOOK_DISABLE_AFTER_FAILING_SEC
and was disabled: replayable), gone (the endpoint answered 410 and was disabled). Counted after the
attempt's outcome is committed, so the cluster's sum is the number of attempts the
`webhook_delivery` rows record. The latency is observed for every request sent (an address the
guard refuses sends none)."""

from __future__ import annotations

from typing import Literal

from prometheus_client import Counter, Histogram

Result = Literal["succeeded", "retrying", "dead", "gone"]
RESULTS: tuple[Result, ...] = ("succeeded", "retrying", "dead", "gone")

# Receivers answer in milliseconds; WEBHOOK_TIMEOUT_MS bounds the slowest.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

DELIVERIES = Counter(
    "paymanager_webhook_deliveries_total",
    "Webhook delivery attempts by result (succeeded, retrying, dead, gone).",
    ["result"],
)
DEAD = Counter(
    "paymanager_webhook_dead_total",
    "Webhook deliveries dead-lettered: every attempt failed (or the endpoint was disabled by failing).",
)
LATENCY_SECONDS = Histogram(
    "paymanager_webhook_delivery_seconds",
    "How long a receiver took to answer a delivery attempt (or to time out).",
    buckets=LATENCY_BUCKETS,
)


def record(result: Result) -> None:
    DELIVERIES.labels(result).inc()
    if result == "dead":
        DEAD.inc()


def sent(latency_ms: int) -> None:
    LATENCY_SECONDS.observe(max(0, latency_ms) / 1000)
