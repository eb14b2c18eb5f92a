"""The engine's Prometheus series (the process's default registry), labelled by queue only: queues
are a deployment's fixed set, kinds and job ids are not bounded, so neither is a label.

Counted where the outcome is written (a completion refused for a lost lease is not counted), so
the sum over the cluster's processes is the number of outcomes in the table."""

from __future__ import annotations

import itertools
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

from prometheus_client import REGISTRY, CollectorRegistry, Counter
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

# The bucket label as prometheus_client writes it ("1.0", "0.005", "+Inf").
_bound_label = cast(Callable[[float], str], floatToGoString)

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


class _Series:
    """One queue's observations: a count per bucket (the last: above every bound) and their sum."""

    __slots__ = ("counts", "total")

    def __init__(self, buckets: int) -> None:
        self.counts = [0] * buckets
        self.total = 0.0


class QueueHistogram(Collector):
    """A histogram labelled by queue, observed without a lock, exported as prometheus_client's own.

    Written here because `prometheus_client.Histogram.observe` takes a lock for the sum and another
    for the bucket on every call, and the worker observes two histograms per job: this one is a
    bisect and two additions, several times cheaper (bench/histogram.py; docs/BENCHMARKS.md, "Job
    engine"). Observations come from the worker's event loop only, so a bucket is a plain list slot.
    A scrape from another thread may read a count one observation ahead of the sum; the next scrape
    agrees again.
    """

    def __init__(
        self, name: str, documentation: str, buckets: Sequence[float], registry: CollectorRegistry = REGISTRY
    ) -> None:
        self._name = name
        self._documentation = documentation
        self._bounds = tuple(float(b) for b in buckets)
        self._labels = [_bound_label(b) for b in self._bounds] + ["+Inf"]
        self._series: dict[str, _Series] = {}
        registry.register(self)

    def observe(self, queue: str, seconds: float) -> None:
        series = self._series.get(queue)
        if series is None:
            series = self._series[queue] = _Series(len(self._labels))
        # `le` buckets: a value equal to a bound counts in that bound's bucket.
        series.counts[bisect_left(self._bounds, seconds)] += 1
        series.total += seconds

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self._name, self._documentation, labels=["queue"])
        for queue, series in list(self._series.items()):
            cumulative = itertools.accumulate(series.counts[:])
            family.add_metric([queue], list(zip(self._labels, cumulative, strict=True)), series.total)
        yield family

    def describe(self) -> Iterator[HistogramMetricFamily]:
        yield HistogramMetricFamily(self._name, self._documentation, labels=["queue"])


WAIT_SECONDS = QueueHistogram(
    "paymanager_job_wait_seconds",
    "From when a job was due (enqueued or scheduled for) to when a worker claimed it.",
    WAIT_BUCKETS,
)
RUN_SECONDS = QueueHistogram(
    "paymanager_job_run_seconds", "How long a job's handler ran, per attempt.", RUN_BUCKETS
)


# A queue's child of each series, looked up once: `Metric.labels()` validates and hashes the label
# values on every call, which costs more than the increment itself at a worker's rate of jobs.
_children: dict[tuple[int, str], Any] = {}


def _child(metric: Counter, queue: str) -> Any:
    key = (id(metric), queue)
    child = _children.get(key)
    if child is None:
        child = _children[key] = metric.labels(queue)
    return child


def count(metric: Counter, queue: str, n: int = 1) -> None:
    _child(metric, queue).inc(n)
