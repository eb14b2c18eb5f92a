"""The invoice-expiry role: a periodic sweep, one run per slot cluster-wide, expires due invoices."""

from __future__ import annotations

import asyncio
import time

import asyncpg

from paymanager.application.intents.invoice_sweep import SWEEP_KIND
from tests.integration.payments.conftest import Api, build_components
from tests.support.waiting import wait_until


async def _statuses(api: Api, ids: list[str]) -> list[str]:
    return [(await api.client.get(f"/intents/{intent_id}")).json()["status"] for intent_id in ids]


async def _slots(pool: asyncpg.Pool) -> int:
    """How many sweep slots were enqueued so far."""
    return int(
        await pool.fetchval("SELECT count(DISTINCT payload->>'slot') FROM job WHERE kind = $1", SWEEP_KIND)
    )


async def test_two_sweeping_processes_expire_due_invoices_once_per_slot(
    api: Api, pool: asyncpg.Pool, database_url: str
) -> None:
    payer = await api.client.open_account()
    merchant = await api.client.open_account(kind="merchant")
    body = {"channel": "merchant-invoice", "amount": 100, "currency": "THB", "payer_account_id": payer,
            "payee_account_id": merchant}  # fmt: skip
    due = [(await api.client.post("/intents", body | {"expires_in_sec": 1})).json()["id"] for _ in range(3)]
    fresh = (await api.client.post("/intents", body | {"expires_in_sec": 3_600})).json()["id"]

    services = []
    for _ in range(2):
        components = await build_components(
            pool, database_url, worker_roles="invoice-expiry", invoice_expiry_sweep_interval_ms=1_000
        )
        services += components.services
    for service in services:
        await service.start()
    try:
        deadline = time.monotonic() + 30
        while await _statuses(api, due) != ["expired"] * 3:
            assert time.monotonic() < deadline, await _statuses(api, due)
            await asyncio.sleep(0.2)
        # A few more slots with both processes scheduling: each one must still run once.
        slots = await _slots(pool)

        async def more_slots() -> bool:
            return await _slots(pool) >= slots + 2

        await wait_until(more_slots)
    finally:
        for service in reversed(services):
            await service.stop(5)

    assert await _statuses(api, [fresh]) == ["created"]
    async with pool.acquire() as conn:
        per_slot = await conn.fetch(
            "SELECT payload->>'slot' AS slot, count(*) AS runs FROM job WHERE kind = $1 GROUP BY 1",
            SWEEP_KIND,
        )
    assert per_slot, "no sweep ran"
    assert all(row["runs"] == 1 for row in per_slot), [dict(r) for r in per_slot]
