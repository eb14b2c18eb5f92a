"""The engine's Prometheus series (the process's default registry), labelled by queue only: queues
are a deployment's fixed set, kinds and job ids are not bounded, so neither is a label.

Counted where the outcome is written (a completion refused for a lost lease is not counted), so
the sum over the cluster's processes is the number of outcomes in the table."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

from prometheus_client import Counter, Histogram
from prometheus_client.metrics import MetricWrapperBase

M = TypeVar("M", bound=MetricWrapperBase)

# From a quick claim to hours of backlog (seconds).
WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600)
RUN_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)

COMPLETED = Counter("paymanager_jobs_completed_total", "Jobs completed, by queue.", ["queue"])
FAILED = Counter(
    "paymanager_jobs_failed_total", "Job attempts that raised (then retried, dead or cancelled).", ["queue"]
)
RETRIED = Counter("paymanager_jobs_retried_total", "Failed attempts scheduled to run again.", ["queue"])
DEAD = Counter(
    "paymanager_jobs_dead_total", "Jobs dead-lettered (attempts spent, permanent error, stalled).", ["queue"]
)
RESCUED = Counter(
    "paymanager_jobs_rescued_total", "Jobs whose lease expired and that the rescuer took back.", ["queue"]
)
WAIT_SECONDS = Histogram(
    "paymanager_job_wait_seconds",
    "From when a job was due (enqueued or scheduled for) to when a worker claimed it.",
    ["queue"],
    buckets=WAIT_BUCKETS,
)
RUN_SECONDS = Histogram(
    "paymanager_job_run_seconds", "How long a job's handler ran, per attempt.", ["queue"], buckets=RUN_BUCKETS
)


def _per_queue(metric: M) -> Callable[[str], M]:
    """The series of `metric` for a queue, looked up once per queue: `labels()` takes the metric's
    lock and builds its key on every call, which a worker did several times per job (a profile of a
    busy worker: 12% of its time in labels, observe and inc; docs/BENCHMARKS.md)."""

    @functools.cache
    def series(queue: str) -> M:
        return metric.labels(queue)

    return series


completed = _per_queue(COMPLETED)
failed = _per_queue(FAILED)
retried = _per_queue(RETRIED)
dead = _per_queue(DEAD)
rescued = _per_queue(RESCUED)
waited = _per_queue(WAIT_SECONDS)
ran = _per_queue(RUN_SECONDS)
