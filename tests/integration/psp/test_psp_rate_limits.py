"""PSP_RATE_LIMIT and PSP_GLOBAL_CONCURRENCY become the `psp.<name>` queues' cluster-wide limits at
start-up; over them payouts wait in their queue, none fails."""

from __future__ import annotations

from tests.integration.psp.conftest import StartPayoutApi


async def test_the_psp_queue_gets_its_limits_and_payouts_wait_under_them(
    start_payout_api: StartPayoutApi,
) -> None:
    api = await start_payout_api(psp_rate_limit="2/1s", psp_global_concurrency=1)
    async with api.payments.pool.acquire() as conn:
        row = await conn.fetchrow(
            "SELECT rate_max, rate_window_ms, concurrency_max FROM job_queue WHERE name = 'psp.ipps'"
        )
    assert row is not None
    assert (row["rate_max"], row["rate_window_ms"], row["concurrency_max"]) == (2, 1_000, 1)
    payer = await api.funded_account(100_000)
    ids = [await api.payout(payer, 1_000) for _ in range(4)]
    for intent_id in ids:
        assert (await api.wait_status(intent_id, {"settled", "failed"}))["status"] == "settled"
    assert sorted(api.sandbox.submissions().values()) == [1] * 4


async def test_off_removes_the_limits(start_payout_api: StartPayoutApi) -> None:
    await start_payout_api(psp_rate_limit="5/1s")
    api = await start_payout_api(psp_rate_limit="off")
    row = await api.payments.pool.fetchrow(
        "SELECT rate_max, concurrency_max FROM job_queue WHERE name = 'psp.ipps'"
    )
    assert row is not None
    assert (row["rate_max"], row["concurrency_max"]) == (None, None)
