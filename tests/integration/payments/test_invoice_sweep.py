"""The invoice-expiry role: a periodic sweep, one run per slot cluster-wide, expires due invoices."""

from __future__ import annotations

import asyncio
import time

import asyncpg

from paymanager.application.intents.invoice_sweep import SWEEP_KIND
from tests.integration.payments.conftest import Api, build_components


async def _statuses(api: Api, ids: list[str]) -> list[str]:
    return [(await api.client.get(f"/intents/{intent_id}")).json()["status"] for intent_id in ids]


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
        await asyncio.sleep(2.5)  # let a few more slots pass with both processes scheduling
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
