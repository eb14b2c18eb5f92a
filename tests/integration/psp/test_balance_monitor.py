"""The balance monitor on three psp-worker processes at once: one alert per change of state (low
partner balance, drift, an unreachable PSP, ok again), never one per process or per tick; and one
claim of a due tick however many monitors race for it."""

from __future__ import annotations

import asyncio

import asyncpg

from paymanager.application.psp.store import PspStore
from tests.integration.psp.conftest import StartPayoutApi
from tests.integration.psp.test_worker_crash import psp_worker
from tests.support.waiting import wait_until

MONITOR_ENV = {
    "BALANCE_MONITOR_ENABLED": "true",
    "BALANCE_TICK_MS": "1000",
    "IPPS_LOW_BALANCE_THRESHOLD_SATANG": "1000",
    "IPPS_DRIFT_THRESHOLD_SATANG": "10000",
}


async def test_three_monitors_raise_one_alert_per_change_of_state(
    start_payout_api: StartPayoutApi, pool: asyncpg.Pool, database_url: str
) -> None:
    api = await start_payout_api(worker_roles="api")
    api.sandbox.faults(partner_balance={"THB": 500})
    workers = [psp_worker(database_url, **MONITOR_ENV) for _ in range(3)]
    try:
        assert all("BalanceMonitor starting" in worker.output for worker in workers)

        async def alerts() -> list[str]:
            rows = await pool.fetch(
                "SELECT state FROM psp_balance_alert WHERE psp = 'ipps' AND currency = 'THB' ORDER BY id"
            )
            return [row["state"] for row in rows]

        async def checks_after(count: int) -> None:
            """Until `count` more checks ran (the stored check's time moved `count` times)."""
            seen: list[object] = []

            async def moved() -> bool:
                at = await pool.fetchval(
                    "SELECT checked_at FROM psp_balance_check WHERE psp = 'ipps' AND currency = 'THB'"
                )
                if at is not None and (not seen or seen[-1] != at):
                    seen.append(at)
                return len(seen) > count

            await wait_until(moved, timeout_s=30)

        expected: list[str] = []
        for faults, state in [
            ({"partner_balance": {"THB": 500}}, "low_partner_balance"),
            ({"partner_balance": {"THB": 50_000}}, "balance_drift"),
            ({"unreachable": True}, "balance_check_failed"),
            ({"unreachable": False, "partner_balance": {"THB": 5_000}}, "balance_ok"),
        ]:
            api.sandbox.faults(**faults)
            expected.append(state)

            async def raised() -> bool:
                return await alerts() == expected

            await wait_until(raised, timeout_s=30)
            await checks_after(2)  # the same state, checked again: no new alert from any process
            assert await alerts() == expected
        shown = await api.admin.get("/admin/balances")
        assert shown.status_code == 200
        [check] = [c for c in shown.json()["data"] if c["currency"] == "THB"]
        assert (check["psp"], check["currency"], check["state"]) == ("ipps", "THB", "balance_ok")
        assert (check["ledger_balance"], check["partner_balance"]) == (0, 5_000)
        assert any('"balance alert"' in worker.output for worker in workers)
    finally:
        for worker in workers:
            worker.close()


async def test_a_due_tick_is_claimed_once_among_racing_monitors(pool: asyncpg.Pool) -> None:
    async def claim() -> bool:
        async with pool.acquire() as conn:
            return await PspStore(conn).claim_balance_tick(psp="ipps", tick_ms=60_000)

    assert sorted(await asyncio.gather(*(claim() for _ in range(5)))) == [False] * 4 + [True]
    assert not await claim()
    await pool.execute("UPDATE psp_balance_tick SET due_at = now() - interval '1 s'")
    assert sorted(await asyncio.gather(*(claim() for _ in range(5)))) == [False] * 4 + [True]
