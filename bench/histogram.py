"""What one histogram observation costs the worker: paymanager's QueueHistogram against
prometheus_client's Histogram (the baseline), in one run, alternating, with the same buckets.

Run: `.venv/bin/python bench/histogram.py [--observations 1000000] [--rounds 5]`.
The worker observes two histograms per job (wait and run seconds); the figure is microseconds per
observation and the ratio of the two, per round.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from prometheus_client import CollectorRegistry, Histogram

from paymanager.jobs.metrics import RUN_BUCKETS, QueueHistogram


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--observations", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    registry = CollectorRegistry()
    baseline = Histogram("base_seconds", "baseline", ["queue"], buckets=RUN_BUCKETS, registry=registry)
    ours = QueueHistogram("ours_seconds", "ours", RUN_BUCKETS, registry)
    child = baseline.labels("q")  # as jobs/metrics.py looked children up: once per queue
    values = [random.expovariate(1 / 0.002) for _ in range(args.observations)]
    ratios = []
    for n in range(1, args.rounds + 1):
        started = time.perf_counter()
        for v in values:
            child.observe(v)
        theirs_us = (time.perf_counter() - started) / len(values) * 1e6
        started = time.perf_counter()
        for v in values:
            ours.observe("q", v)
        ours_us = (time.perf_counter() - started) / len(values) * 1e6
        ratios.append(theirs_us / ours_us)
        print(
            f"round {n}: prometheus_client {theirs_us:.3f} us, QueueHistogram {ours_us:.3f} us,"
            f" {ratios[-1]:.2f}x"
        )
    print(f"median {statistics.median(ratios):.2f}x fewer microseconds per observation")


if __name__ == "__main__":
    main()
