"""`/metrics` after a scripted run: the engine's counters and histograms move (a rate-limited queue's
wait too), the query gauges hold the table's counts, a dead job is logged at error level, the query
gauges are computed once per interval for every process (the shared snapshot); payouts through the
sandbox PSP and deliveries to the sandbox merchant receiver move the PSP, balance and webhook series."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence

import asyncpg
import structlog
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from paymanager import bootstrap, metrics
from paymanager.application.psp.balance import BalanceMonitor, nostro_accounts
from paymanager.db.pool import Conn
from paymanager.jobs import JobContext, PermanentError, Registry, Worker, WorkerOptions, enqueue
from paymanager.jobs.admin import set_rate_limit
from paymanager.metrics import QueryGauge, QueryGauges, Sample
from paymanager.metrics.psp import OPERATIONS
from paymanager.metrics.webhooks import RESULTS
from tests.integration.psp.conftest import StartPayoutApi
from tests.integration.webhooks.conftest import start_hooks, stop_hooks
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
                dead_logged = any(line.get("event") == "job dead" for line in logs)
                return n == 4 and value("paymanager_jobs_dead_total", queue=queue) == 1 and dead_logged

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


async def test_a_rate_limited_queue_observes_how_long_its_jobs_waited(
    pool: asyncpg.Pool, database_url: str
) -> None:
    # A limited queue is claimed by job_claim_limited alone: its jobs' wait must be observed as well.
    queue = "rl" + uuid.uuid4().hex[:8]
    registry = Registry()

    @registry.handler("ok", queue=queue)
    async def ok(_: JobContext) -> None:
        return None

    async with pool.acquire() as conn:
        await set_rate_limit(conn, queue, max_jobs=100, window_ms=1_000)
        for _ in range(3):
            await enqueue(conn, "ok", {}, queue=queue)
    waits0 = value("paymanager_job_wait_seconds_count", queue=queue)
    worker = Worker(
        pool, database_url, registry, {queue: 2}, WorkerOptions(owner="rl-test", poll_interval_ms=50)
    )
    await worker.start()
    try:

        async def completed() -> bool:
            n = await pool.fetchval(
                "SELECT count(*) FROM job WHERE queue = $1 AND state = 'completed'", queue
            )
            return bool(n == 3)

        await wait_until(completed)
    finally:
        await worker.stop(5)
    assert value("paymanager_job_wait_seconds_count", queue=queue) - waits0 == 3
    assert value("paymanager_job_wait_seconds_sum", queue=queue) >= 0


async def test_payouts_through_the_sandbox_move_the_psp_series_and_gauges(
    start_payout_api: StartPayoutApi,
) -> None:
    payouts = await start_payout_api(metrics_query_interval_ms=0)
    before = {
        state: value("paymanager_psp_payouts_total", psp="ipps", state=state)
        for state in ("COMPLETED", "FAILED", "MANUAL_REVIEW")
    }
    calls0 = {op: value("paymanager_psp_call_seconds_count", psp="ipps", operation=op) for op in OPERATIONS}
    payer = await payouts.funded_account(100_000)
    paid = await payouts.payout(payer, 1_000)
    await payouts.wait_status(paid, {"settled"})
    payouts.sandbox.faults(manual_review_rate=1)
    held = await payouts.payout(payer, 2_000)
    await payouts.wait_psp_state(held, {"MANUAL_REVIEW"})
    payouts.sandbox.faults(manual_review_rate=0, account_invalid_rate=1)
    refused = await payouts.payout(payer, 3_000)
    await payouts.wait_status(refused, {"failed"})

    assert value("paymanager_psp_payouts_total", psp="ipps", state="COMPLETED") - before["COMPLETED"] == 1
    assert (
        value("paymanager_psp_payouts_total", psp="ipps", state="MANUAL_REVIEW") - before["MANUAL_REVIEW"]
        == 1
    )
    assert value("paymanager_psp_payouts_total", psp="ipps", state="FAILED") - before["FAILED"] == 1
    calls = {
        op: value("paymanager_psp_call_seconds_count", psp="ipps", operation=op) - calls0[op]
        for op in OPERATIONS
    }
    # Three beneficiary checks; two transfers (the refused account never gets one).
    assert calls["query"] == 3
    assert calls["transfer"] == 2

    payouts.sandbox.faults(account_invalid_rate=0, partner_balance={"THB": 500})
    monitor = BalanceMonitor(payouts.payments, payouts.components.psp_drivers)
    account = nostro_accounts(payouts.payments, "ipps")["THB"]
    state = await monitor.check("ipps", "THB", account)
    assert state == "low_partner_balance"
    assert (
        value("paymanager_psp_call_seconds_count", psp="ipps", operation="partner_balance")
        - calls0["partner_balance"]
        == 1
    )
    samples = scraped((await payouts.http.get("/metrics")).content)
    assert samples[("paymanager_psp_manual_review", (("psp", "ipps"),))] == 1
    assert samples[("paymanager_psp_manual_review_oldest_age_seconds", (("psp", "ipps"),))] >= 0
    assert balance_states(samples) == {
        "balance_ok": 0, "low_partner_balance": 1, "balance_drift": 0, "balance_check_failed": 0,
    }  # fmt: skip
    assert (
        "paymanager_psp_balance_checked_timestamp_seconds",
        (("currency", "THB"), ("psp", "ipps")),
    ) in samples

    payouts.sandbox.faults(unreachable=True)
    labels = {"psp": "ipps", "operation": "partner_balance", "reason": "unavailable"}
    failures0 = value("paymanager_psp_call_failures_total", **labels)
    assert await monitor.check("ipps", "THB", account) == "balance_check_failed"
    assert value("paymanager_psp_call_failures_total", **labels) - failures0 == 1
    samples = scraped((await payouts.http.get("/metrics")).content)
    assert balance_states(samples) == {
        "balance_ok": 0, "low_partner_balance": 0, "balance_drift": 0, "balance_check_failed": 1,
    }  # fmt: skip


def balance_states(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> dict[str, float]:
    """The ipps THB members of the balance state-set."""
    return {
        dict(labels)["state"]: v
        for (name, labels), v in samples.items()
        if name == "paymanager_psp_balance_state"
        and dict(labels).get("psp") == "ipps"
        and dict(labels).get("currency") == "THB"
    }


async def test_webhook_deliveries_move_the_webhook_series_and_gauges(
    pool: asyncpg.Pool, database_url: str
) -> None:
    hooks, http = await start_hooks(pool, database_url, webhook_max_attempts=1, metrics_query_interval_ms=0)
    try:
        results0 = {r: value("paymanager_webhook_deliveries_total", result=r) for r in RESULTS}
        dead0 = value("paymanager_webhook_dead_total")
        latency0 = value("paymanager_webhook_delivery_seconds_count")
        good, _ = await hooks.endpoint("/good", types=["intent.settled"])
        bad, _ = await hooks.endpoint("/bad", types=["intent.settled"], mode="fail")
        gone, _ = await hooks.endpoint("/gone", types=["intent.settled"], mode="gone")
        await hooks.settled_intent()
        await hooks.wait_finished(good, 1)
        await hooks.wait_finished(bad, 1, status="dead")
        await hooks.wait_finished(gone, 1, status="cancelled")

        deltas = {r: value("paymanager_webhook_deliveries_total", result=r) - results0[r] for r in RESULTS}
        assert deltas == {"succeeded": 1, "retrying": 0, "dead": 1, "gone": 1}
        assert value("paymanager_webhook_dead_total") - dead0 == 1
        assert value("paymanager_webhook_delivery_seconds_count") - latency0 == 3

        response = await http.get("/metrics")
        samples = scraped(response.content)
        assert samples[("paymanager_webhook_deliveries_dead", ())] == 1
        assert samples[("paymanager_webhook_endpoints_disabled", ())] == 1
    finally:
        await stop_hooks(hooks, http)
