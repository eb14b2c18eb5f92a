"""What the dashboard shows an operator, from the database: the queues' throughput over every
process's completions (and its lower bound once retention pruned some), and an intent's whole
timeline: status changes, ledger transfers, jobs, refunds and webhook deliveries, oldest first."""

from __future__ import annotations

import uuid

import asyncpg

from paymanager.application.admin import ops
from tests.integration.webhooks.conftest import start_hooks, stop_hooks
from tests.support.waiting import wait_until


async def _completed(pool: asyncpg.Pool, queue: str, *, minutes_ago: int, count: int) -> None:
    await pool.execute(
        "INSERT INTO job (queue, kind, state, payload, attempt, attempted_at, finalized_at)"
        " SELECT $1, 'ops.tp', 'completed', '{}', 1, now() - make_interval(mins => $2),"
        " now() - make_interval(mins => $2) FROM generate_series(1, $3)",
        queue, minutes_ago, count,
    )  # fmt: skip


async def test_throughput_counts_the_completions_of_the_window_and_flags_pruned_queues(
    pool: asyncpg.Pool,
) -> None:
    quiet, busy = "q" + uuid.uuid4().hex[:6], "b" + uuid.uuid4().hex[:6]
    await _completed(pool, quiet, minutes_ago=2, count=15)
    await _completed(pool, quiet, minutes_ago=30, count=40)
    await _completed(pool, busy, minutes_ago=1, count=100)
    async with pool.acquire() as conn:
        rates = await ops.throughput(conn, kept_max=100, window_s=300)
        unbounded = await ops.throughput(conn, kept_max=0, window_s=300)
    # 15 in five minutes; the 40 older ones are outside the window; the quiet queue holds fewer than
    # retention keeps, so nothing of it was pruned.
    assert rates[quiet] == ops.Throughput(per_minute=3.0, at_least=False)
    # The busy queue holds as many completed jobs as retention keeps: pruned ones may be missing.
    assert rates[busy] == ops.Throughput(per_minute=20.0, at_least=True)
    assert unbounded[busy].at_least is False, "no count retention: nothing is pruned by count"


async def test_an_intents_timeline_has_its_status_ledger_jobs_refunds_and_webhooks(
    pool: asyncpg.Pool, database_url: str
) -> None:
    hooks, http = await start_hooks(pool, database_url)
    try:
        endpoint_id, _ = await hooks.endpoint("/all", types=["intent.settled", "refund.succeeded"])
        intent_id = await hooks.settled_intent(1_000)
        refund = await hooks.shop.post(f"/intents/{intent_id}/refunds", {"amount": 400})
        assert refund.status_code == 201, refund.text
        refund_id = refund.json()["id"]

        async def delivered() -> bool:
            # Both events delivered, and the settle job's completion (written after the settlement's
            # commit, in the worker's next batch) recorded.
            rows = await hooks.deliveries(endpoint_id)
            unfinished = await pool.fetchval(
                "SELECT count(*) FROM job WHERE kind = 'intent.settle' AND state <> 'completed'"
                " AND payload @> jsonb_build_object('intent_id', $1::text)",
                intent_id,
            )
            return len(rows) == 2 and all(r["status"] == "succeeded" for r in rows) and unfinished == 0

        await wait_until(delivered)
        async with pool.acquire() as conn:
            timeline = await ops.intent_timeline(hooks.payments, conn, uuid.UUID(intent_id))
            missing = await ops.intent_timeline(hooks.payments, conn, uuid.uuid4())
    finally:
        await stop_hooks(hooks, http)
    assert missing is None
    assert timeline is not None
    assert [e.at for e in timeline] == sorted(e.at for e in timeline)
    texts = [(e.source, e.text) for e in timeline]
    intent_steps = [text for source, text in texts if source == "intent"]
    assert intent_steps == ["created", "confirmed", "settled"]
    ledger = {" ".join(text.split(" ")[1:3]): text for source, text in texts if source == "ledger"}
    # The amount's hold then post (the fee's legs beside them), then the refund's transfer of 400.
    order = [" ".join(text.split(" ")[1:3]) for source, text in texts if source == "ledger"]
    assert order.index("hold (amount)") < order.index("post (amount)") < order.index("transfer (refund")
    assert ledger["hold (amount)"].split(" ")[3] == "1000"
    assert ledger["transfer (refund"].split(" ")[4] == "400"
    settle = [text.rsplit(" ", 1)[1] for source, text in texts if source == "job" and "intent.settle" in text]
    assert settle == ["enqueued", "completed"]
    refunds = [text for source, text in texts if source == "refund"]
    assert refunds == [f"refund {refund_id} of 400 requested", f"refund {refund_id} succeeded"]
    hooks_seen = sorted(text.split(" ")[1] for source, text in texts if source == "webhook")
    assert hooks_seen == ["intent.settled", "refund.succeeded"]
    assert all(
        f"to {endpoint_id}: succeeded after 1 attempt(s)" in text
        for source, text in texts
        if source == "webhook"
    )
