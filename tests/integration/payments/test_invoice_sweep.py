"""The invoice-expiry role: a periodic sweep, one run per slot cluster-wide, expires due invoices,
releasing on TigerBeetle the holds lost confirms left."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from paymanager.application.intents.invoice_sweep import SWEEP_KIND, sweep_invoices
from tests.integration.payments.conftest import Api, build_components
from tests.support.lost_confirms import confirm_then_roll_back, funded_invoice, voided_legs
from tests.support.waiting import wait_until

pytestmark = pytest.mark.both_ledgers


async def _statuses(api: Api, ids: list[str]) -> list[str]:
    return [(await api.client.get(f"/intents/{intent_id}")).json()["status"] for intent_id in ids]


async def _slots(pool: asyncpg.Pool) -> int:
    """How many sweep slots were enqueued so far."""
    return int(
        await pool.fetchval("SELECT count(DISTINCT payload->>'slot') FROM job WHERE kind = $1", SWEEP_KIND)
    )


async def test_two_sweeping_processes_expire_due_invoices_once_per_slot(
    api: Api, pool: asyncpg.Pool, database_url: str, ledger_settings: dict[str, object]
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
            pool, database_url, worker_roles="invoice-expiry", invoice_expiry_sweep_interval_ms=1_000,
            **ledger_settings,
        )  # fmt: skip
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


async def test_the_sweep_releases_the_hold_a_lost_confirm_left_on_an_invoice_it_expires(
    api: Api, ledger_backend: str
) -> None:
    """On TigerBeetle a confirm that dies before its commit leaves its hold (made before the commit);
    the sweep that expires the invoice voids it. On PostgreSQL the hold rolled back with the confirm."""
    payer, invoice = await funded_invoice(api, funding=10_000, amount=1_000, expires_in_sec=60)
    await confirm_then_roll_back(api, invoice["id"])
    left = 1_000 + invoice["fee"] if ledger_backend == "tigerbeetle" else 0
    assert (await api.client.balance(payer))["available"] == 10_000 - left
    api.clock.now = datetime.now(UTC) + timedelta(seconds=120)
    assert await sweep_invoices(api.payments) == 1
    api.clock.now = None
    shown = (await api.client.get(f"/intents/{invoice['id']}")).json()
    assert (shown["status"], shown["failure_reason"]) == (
        "expired", "the invoice expired before it was confirmed",
    )  # fmt: skip
    assert (await api.client.balance(payer))["available"] == 10_000
    assert (await api.client.balance(invoice["payee_account_id"]))["posted"] == 0
    if ledger_backend == "tigerbeetle":
        assert await voided_legs(api, invoice["id"]) == (2 if invoice["fee"] else 1)
