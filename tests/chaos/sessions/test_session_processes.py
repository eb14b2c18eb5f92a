"""Session actions and the session-cleanup in real processes: a worker killed with SIGKILL in the middle
of a compensation (it still happens exactly once), and two processes with the session-cleanup role
(each session expires once and each compensation is enqueued once)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg
import httpx
import pytest

from paymanager.api.app import create_app
from paymanager.application.services.use_cases import create_service
from tests.integration.payments.conftest import build_components
from tests.support.processes import PaymanagerProcess, paymanager_env
from tests.support.sandboxes import SandboxAdmin, card_sandbox, giftcard_sandbox
from tests.support.signed_client import SignedClient
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

# Short leases so a killed worker's job comes back within seconds.
FAST_RESCUE = {
    "JOB_LEASE_MS": "2000",
    "JOB_HEARTBEAT_INTERVAL_MS": "500",
    "JOB_RESCUE_INTERVAL_MS": "200",
    "OUTBOX_INTERVAL_MS": "200",
}


@dataclass
class Stage:
    database_url: str
    pool: asyncpg.Pool
    shop: SignedClient
    merchant: str
    giftcards: SandboxAdmin
    cards: SandboxAdmin

    def env(self, roles: str, **extra: str) -> dict[str, str]:
        return paymanager_env(
            self.database_url,
            WORKER_ROLES=roles,
            SESSIONS_ENABLED="true",
            GIFTCARD_BASE_URL=self.giftcards.url,
            CARD_BASE_URL=self.cards.url,
            PROVIDER_TIMEOUT_MS="10000",
            **(FAST_RESCUE | extra),
        )

    async def session(self, legs: list[tuple[str, str, int]]) -> dict[str, object]:
        body = {
            "merchant_account_id": self.merchant,
            "amount": sum(leg[2] for leg in legs),
            "currency": "THB",
            "ttl_sec": 3_600,
            "legs": [{"kind": k, "card": c, "amount": a} for k, c, a in legs],
        }
        response = await self.shop.post("/checkout-sessions", body)
        assert response.status_code == 201, response.text
        result: dict[str, object] = response.json()
        return result

    async def leg_status(self, session_id: object, position: int) -> str:
        return str(
            await self.pool.fetchval(
                "SELECT status FROM checkout_session_leg WHERE session_id = $1 AND position = $2",
                uuid.UUID(str(session_id)), position,
            )
        )  # fmt: skip


@pytest.fixture
async def stage(pool: asyncpg.Pool, database_url: str) -> AsyncIterator[Stage]:
    """An in-process api (no worker) over the test database, with both sandboxes serving."""
    with giftcard_sandbox() as giftcards, card_sandbox() as cards:
        components = await build_components(
            pool,
            database_url,
            sessions_enabled=True,
            giftcard_base_url=giftcards.url,
            card_base_url=cards.url,
        )
        app = create_app(components)
        async with pool.acquire() as conn:
            shop, secret = await create_service(conn, components.payments.box, "shop", admin=False)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as http:
            client = SignedClient(http, shop.id, secret)
            merchant = await client.open_account(kind="merchant")
            yield Stage(database_url, pool, client, merchant, giftcards, cards)
        await components.close()


async def test_a_worker_killed_during_a_compensation_still_cancels_the_debit_once(stage: Stage) -> None:
    await stage.giftcards.cards(("GC-KILL", 1_000))
    # The card's authorisation keeps failing, so the session stays processing with the gift captured.
    await stage.cards.faults(fail_cards=["tok_kill"])
    session = await stage.session([("gift_card", "GC-KILL", 600), ("card", "tok_kill", 400)])
    worker = PaymanagerProcess(stage.env("outbox-worker"))
    try:
        worker.wait_for_line("started in headless mode")
        assert (await stage.shop.post(f"/checkout-sessions/{session['id']}/confirm")).status_code == 200

        async def captured() -> bool:
            return await stage.leg_status(session["id"], 0) == "captured"

        await wait_until(captured, timeout_s=30)
        assert await stage.giftcards.balance("GC-KILL") == 400
        # The cancel's call will take long: the worker is killed while it waits for the answer.
        await stage.giftcards.faults(latency_ms=5_000)
        assert (await stage.shop.post(f"/checkout-sessions/{session['id']}/cancel")).status_code == 200

        async def cancel_sent() -> bool:
            return await stage.giftcards.counter("GC-KILL", "cancel_submissions") >= 1

        await wait_until(cancel_sent, timeout_s=30)
        worker.kill()
    finally:
        worker.close()
    await stage.giftcards.faults(latency_ms=0)
    # The sandbox applies the first cancel when its latency ends; a new worker repeats it by key.
    successor = PaymanagerProcess(stage.env("outbox-worker"))
    try:

        async def cancelled() -> bool:
            return await stage.leg_status(session["id"], 0) == "cancelled"

        await wait_until(cancelled, timeout_s=60)
    finally:
        assert successor.terminate() == 0, successor.output
        successor.close()
    counters = (await stage.giftcards.counters())["GC-KILL"]
    assert counters["debits_applied"] == 1
    assert counters["cancel_submissions"] == 2
    assert counters["cancels_applied"] == 1
    assert await stage.giftcards.balance("GC-KILL") == 1_000
    jobs = await stage.pool.fetch("SELECT state, stalled_count FROM job WHERE kind = 'CANCEL_GIFT'")
    assert [job["state"] for job in jobs] == ["completed"]
    # The killed worker's claim was rescued once and run again (the kill is not a failed attempt).
    assert jobs[0]["stalled_count"] == 1


async def test_two_cleanup_processes_expire_each_session_once(stage: Stage) -> None:
    # Half the sessions are processing with a captured gift and a card whose authorisation keeps
    # failing (attempted, outcome unknown); the other half are open.
    processing, opened = 8, 8
    await stage.giftcards.cards(*[(f"GC-C{n}", 1_000) for n in range(processing)])
    await stage.cards.faults(fail_cards=[f"tok_c{n}" for n in range(processing)])
    worker = PaymanagerProcess(stage.env("outbox-worker"))
    try:
        busy = [await stage.session([("gift_card", f"GC-C{n}", 100), ("card", f"tok_c{n}", 100)])
                for n in range(processing)]  # fmt: skip
        for session in busy:
            assert (await stage.shop.post(f"/checkout-sessions/{session['id']}/confirm")).status_code == 200
        for n in range(opened):
            await stage.session([("card", f"tok_o{n}", 100)])

        async def all_captured() -> bool:
            return all([await stage.leg_status(s["id"], 0) == "captured" for s in busy])

        await wait_until(all_captured, timeout_s=60)
    finally:
        assert worker.terminate() == 0, worker.output
        worker.close()
    # Every session is due now.
    await stage.pool.execute(
        "UPDATE checkout_session SET created_at = created_at - interval '2 hours',"
        " expires_at = now() - interval '1 second'"
    )
    cleaners = [
        PaymanagerProcess(stage.env("session-cleanup", CLEANUP_INTERVAL_MS="1000", CLEANUP_BATCH_SIZE="3"))
        for _ in range(2)
    ]
    try:

        async def all_expired() -> bool:
            active = await stage.pool.fetchval(
                "SELECT count(*) FROM checkout_session WHERE status IN ('open', 'processing')"
            )
            return int(active) == 0

        await wait_until(all_expired, timeout_s=90)
    finally:
        outputs = []
        for cleaner in cleaners:
            assert cleaner.terminate() == 0, cleaner.output
            outputs.append(cleaner.output)
            cleaner.close()
    ticks = [
        json.loads(line)
        for output in outputs
        for line in output.splitlines()
        if line.startswith("{") and '"cleanup tick"' in line
    ]
    assert sum(tick["expired"] for tick in ticks) == processing + opened
    assert all(tick["expired"] <= 3 and tick["scanned"] >= tick["expired"] for tick in ticks)
    assert sum(tick["enqueuedCancelGifts"] for tick in ticks) == processing
    assert sum(tick["enqueuedReleases"] for tick in ticks) == processing
    events = await stage.pool.fetch("SELECT session_id, type FROM checkout_session_event")
    assert len(events) == processing + opened
    assert {e["type"] for e in events} == {"session.expired"}
    for kind in ("CANCEL_GIFT", "RELEASE_HOLD"):
        keys = [
            r["unique_key"]
            for r in await stage.pool.fetch("SELECT unique_key FROM job WHERE kind = $1", kind)
        ]
        assert len(keys) == processing
        assert len(set(keys)) == processing
