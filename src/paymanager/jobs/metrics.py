"""The engine's Prometheus series (the process's default registry), labelled by queue only: queues
are a deployment's fixed set, kinds and job ids are not bounded, so neither is a label.

Counted where the outcome is written (a completion refused for a lost lease is not counted), so
the sum over the cluster's processes is the number of outcomes in the table."""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter, Histogram

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


# A queue's child of each series, looked up once: `Metric.labels()` validates and hashes the label
# values on every call, which costs more than the increment itself at a worker's rate of jobs.
_children: dict[tuple[int, str], Any] = {}


def _child(metric: Counter | Histogram, queue: str) -> Any:
    key = (id(metric), queue)
    child = _children.get(key)
    if child is None:
        child = _children[key] = metric.labels(queue)
    return child


def count(metric: Counter, queue: str, n: int = 1) -> None:
    _child(metric, queue).inc(n)


def observe(metric: Histogram, queue: str, seconds: float) -> None:
    _child(metric, queue).observe(seconds)
