"""Checkout sessions on a real database, with the gift-card and card sandboxes over real HTTP: the
components of a process with the api, outbox-worker and session-cleanup roles (worker started), an
in-process API, a shop service with a merchant account, and helpers to drive and wait."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import asyncpg
import httpx
import pytest

from paymanager import bootstrap
from paymanager.api.app import create_app
from paymanager.application.services.use_cases import create_service
from paymanager.application.sessions.context import Sessions
from paymanager.jobs import admin
from tests.integration.payments.conftest import FixedClock, build_components
from tests.support.sandboxes import SandboxAdmin, card_sandbox, giftcard_sandbox
from tests.support.signed_client import SignedClient
from tests.support.waiting import wait_until

ACTION_QUEUE = "session-actions"


@pytest.fixture
def giftcards() -> Iterator[SandboxAdmin]:
    with giftcard_sandbox() as admin_client:
        yield admin_client


@pytest.fixture
def cards() -> Iterator[SandboxAdmin]:
    with card_sandbox() as admin_client:
        yield admin_client


@dataclass
class Env:
    components: bootstrap.Components
    sessions: Sessions
    clock: FixedClock
    shop: SignedClient
    pool: asyncpg.Pool
    giftcards: SandboxAdmin
    cards: SandboxAdmin
    merchant: str

    async def create(
        self, legs: list[tuple[str, str, int]], *, ttl_sec: int = 900, **extra: Any
    ) -> dict[str, Any]:
        """An open session paying the merchant, with legs (kind, card, amount)."""
        amount = sum(leg[2] for leg in legs)
        body = {
            "merchant_account_id": self.merchant,
            "amount": amount,
            "currency": "THB",
            "ttl_sec": ttl_sec,
            "legs": [{"kind": kind, "card": card, "amount": value} for kind, card, value in legs],
            **extra,
        }
        response = await self.shop.post("/checkout-sessions", body)
        assert response.status_code == 201, response.text
        result: dict[str, Any] = response.json()
        return result

    async def confirm(self, session_id: str) -> httpx.Response:
        return await self.shop.post(f"/checkout-sessions/{session_id}/confirm")

    async def get(self, session_id: str) -> dict[str, Any]:
        response = await self.shop.get(f"/checkout-sessions/{session_id}")
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result

    async def wait_status(self, session_id: str, status: str) -> dict[str, Any]:
        async def reached() -> bool:
            return bool((await self.get(session_id))["status"] == status)

        await wait_until(reached)
        return await self.get(session_id)

    async def wait_leg(self, session_id: str, position: int, status: str) -> None:
        async def reached() -> bool:
            return bool((await self.get(session_id))["legs"][position]["status"] == status)

        await wait_until(reached)

    async def wait_actions_done(self) -> None:
        """Until no session action is queued, running or waiting for a retry."""

        async def idle() -> bool:
            left = await self.pool.fetchval(
                "SELECT count(*) FROM job"
                " WHERE queue = $1 AND state NOT IN ('completed', 'dead', 'cancelled')",
                ACTION_QUEUE,
            )
            return int(left) == 0

        await wait_until(idle)

    async def retry_now(self, kind: str) -> int:
        """Run every retryable `kind` job now instead of at its next attempt (1 min on)."""
        async with self.pool.acquire() as conn:
            ids = [
                r["id"]
                for r in await conn.fetch("SELECT id FROM job WHERE kind = $1 AND state = 'retryable'", kind)
            ]
            for job_id in ids:
                assert await admin.retry_job(conn, job_id)
        return len(ids)

    async def wait_job(self, kind: str, state: str, count: int = 1) -> None:
        async def reached() -> bool:
            found = await self.pool.fetchval(
                "SELECT count(*) FROM job WHERE kind = $1 AND state = $2", kind, state
            )
            return int(found) >= count

        await wait_until(reached)

    async def jobs(self, kind: str) -> list[asyncpg.Record]:
        return list(await self.pool.fetch("SELECT * FROM job WHERE kind = $1 ORDER BY id", kind))

    async def events(self, session_id: str) -> list[str]:
        rows = await self.pool.fetch(
            "SELECT type FROM checkout_session_event WHERE session_id = $1 ORDER BY created_at",
            uuid.UUID(session_id),
        )
        return [r["type"] for r in rows]

    def past_expiry(self, session: dict[str, Any]) -> None:
        """Move this process's clock just past the session's expiry."""
        from datetime import datetime

        self.clock.now = datetime.fromisoformat(session["expires_at"]) + timedelta(seconds=1)


async def session_env(
    pool: asyncpg.Pool, database_url: str, giftcards: SandboxAdmin, cards: SandboxAdmin, **overrides: object
) -> AsyncIterator[Env]:
    values: dict[str, object] = {
        "worker_roles": "api,outbox-worker,session-cleanup",
        "sessions_enabled": True,
        "giftcard_base_url": giftcards.url,
        "card_base_url": cards.url,
        "provider_timeout_ms": 1_000,
        # The tests run the cleanup themselves; the periodic tick stays out of their way.
        "cleanup_interval_ms": 86_400_000,
    } | overrides
    components = await build_components(pool, database_url, **values)
    assert components.sessions is not None
    clock = FixedClock()
    components.payments.clock = clock
    for service in components.services:
        await service.start()
    app = create_app(components)
    async with pool.acquire() as conn:
        shop, secret = await create_service(conn, components.payments.box, "shop", admin=False)
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            client = SignedClient(http, shop.id, secret)
            merchant = await client.open_account(kind="merchant")
            yield Env(components, components.sessions, clock, client, pool, giftcards, cards, merchant)
    finally:
        for service in reversed(components.services):
            await service.stop(5)
        await components.close()


@pytest.fixture
async def env(
    pool: asyncpg.Pool, database_url: str, giftcards: SandboxAdmin, cards: SandboxAdmin
) -> AsyncIterator[Env]:
    async for value in session_env(pool, database_url, giftcards, cards):
        yield value
