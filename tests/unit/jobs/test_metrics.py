"""The engine's histograms read as prometheus_client's own: `le` buckets, counts and sums per queue."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from paymanager.jobs.metrics import QueueHistogram


def _histogram() -> tuple[QueueHistogram, CollectorRegistry]:
    registry = CollectorRegistry()
    return QueueHistogram("t_seconds", "a test histogram", (0.01, 0.1, 1), registry), registry


def test_a_value_on_a_bound_counts_in_that_bucket_and_buckets_are_cumulative() -> None:
    histogram, registry = _histogram()
    for seconds in (0.005, 0.01, 0.05, 1.0, 7.0):
        histogram.observe("outbox", seconds)

    def value(suffix: str, **labels: str) -> float | None:
        return registry.get_sample_value(f"t_seconds{suffix}", {"queue": "outbox", **labels})

    assert [value("_bucket", le=le) for le in ("0.01", "0.1", "1.0", "+Inf")] == [2, 3, 4, 5]
    assert value("_count") == 5
    assert value("_sum") == 0.005 + 0.01 + 0.05 + 1.0 + 7.0


def test_each_queue_is_its_own_series_in_the_exposition() -> None:
    histogram, registry = _histogram()
    histogram.observe("outbox", 0.2)
    histogram.observe("webhooks", 0.02)
    text = generate_latest(registry).decode()
    assert "# TYPE t_seconds histogram" in text
    assert 't_seconds_bucket{le="0.1",queue="outbox"} 0.0' in text
    assert 't_seconds_bucket{le="0.1",queue="webhooks"} 1.0' in text
    assert 't_seconds_count{queue="webhooks"} 1.0' in text
