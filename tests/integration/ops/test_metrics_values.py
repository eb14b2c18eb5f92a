"""`/metrics` after a scripted run: the engine's counters and histograms move, the query gauges hold
the table's counts, a dead job is logged at error level, and the query gauges are computed once per
interval for every process (the shared snapshot)."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence

import asyncpg
import structlog
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from paymanager import bootstrap, metrics
from paymanager.db.pool import Conn
from paymanager.jobs import JobContext, PermanentError, Registry, Worker, WorkerOptions, enqueue
from paymanager.metrics import QueryGauge, QueryGauges, Sample
from tests.support.waiting import wait_until


def value(name: str, **labels: str) -> float:
    found = REGISTRY.get_sample_value(name, labels)
    return found or 0.0


def scraped(body: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


async def test_a_run_moves_the_job_series_and_the_gauges_hold_the_counts(
    pool: asyncpg.Pool, database_url: str
) -> None:
    queue = "m" + uuid.uuid4().hex[:8]
    registry = Registry()

    @registry.handler("ok", queue=queue)
    async def ok(_: JobContext) -> None:
        return None

    @registry.handler("boom", queue=queue)
    async def boom(_: JobContext) -> None:
        raise PermanentError("card declined by the sandbox")

    completed0 = value("paymanager_jobs_completed_total", queue=queue)
    waits0 = value("paymanager_job_wait_seconds_count", queue=queue)
    runs0 = value("paymanager_job_run_seconds_count", queue=queue)
    async with pool.acquire() as conn:
        for _ in range(3):
            await enqueue(conn, "ok", {}, queue=queue)
        dead_id = (await enqueue(conn, "boom", {}, queue=queue, max_attempts=1)).id
    worker = Worker(
        pool,
        database_url,
        registry,
        {queue: 2},
        WorkerOptions(owner="metrics-test", poll_interval_ms=100),
        on_dead=bootstrap.log_dead_job,
    )
    with structlog.testing.capture_logs() as logs:
        await worker.start()
        try:

            async def finished() -> bool:
                n = await pool.fetchval(
                    "SELECT count(*) FROM job WHERE queue = $1 AND state IN ('completed', 'dead')", queue
                )
                return n == 4 and value("paymanager_jobs_dead_total", queue=queue) == 1

            await wait_until(finished)
        finally:
            await worker.stop(5)

    assert value("paymanager_jobs_completed_total", queue=queue) - completed0 == 3
    assert value("paymanager_jobs_failed_total", queue=queue) == 1
    assert value("paymanager_job_wait_seconds_count", queue=queue) - waits0 == 4
    assert value("paymanager_job_run_seconds_count", queue=queue) - runs0 == 4
    dead_lines = [line for line in logs if line.get("event") == "job dead"]
    assert dead_lines == [
        {
            "event": "job dead", "log_level": "error", "job_id": dead_id, "kind": "boom", "queue": queue,
            "attempts": 1, "last_error": "card declined by the sandbox",
        }
    ]  # fmt: skip

    from paymanager.application.admin.gauges import register_gauges

    register_gauges(metrics.QUERY_GAUGES)
    body = await metrics.render(pool, interval_ms=0)
    samples = scraped(body)
    assert samples[("paymanager_jobs", (("queue", queue), ("state", "completed")))] == 3
    assert samples[("paymanager_jobs", (("queue", queue), ("state", "dead")))] == 1
    assert ("paymanager_job_oldest_available_age_seconds", (("queue", queue),)) not in samples


async def test_query_gauges_are_computed_once_per_interval_for_every_process(pool: asyncpg.Pool) -> None:
    calls: list[int] = []

    def counting(n: float) -> Callable[[Conn], Awaitable[Sequence[Sample]]]:
        async def query(conn: Conn) -> Sequence[Sample]:
            calls.append(1)
            return [(("a",), n)]

        return query

    # Two "processes": two collectors sharing the database's snapshot row.
    first, second = QueryGauges(), QueryGauges()
    first.register(QueryGauge("test_gauge", "doc", ("label",), counting(7)))
    second.register(QueryGauge("test_gauge", "doc", ("label",), counting(9)))
    await first.refresh(pool, 60_000)
    await second.refresh(pool, 60_000)
    await first.refresh(pool, 60_000)
    assert len(calls) == 1
    for collector in (first, second):
        family = next(f for f in collector.collect() if f.name == "test_gauge")
        assert [(s.labels, s.value) for s in family.samples] == [({"label": "a"}, 7.0)]
    # Past the interval (0 here), the next scrape computes again.
    await second.refresh(pool, 0)
    assert len(calls) == 2
