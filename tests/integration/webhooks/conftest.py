"""Webhooks on a real database and real HTTP: the components of an `api,outbox-worker` process (its
job worker delivering), the API over ASGI, and the merchant sandbox receiver on a real socket."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import asyncpg
import httpx
import pytest

from paymanager import bootstrap
from paymanager.api.app import create_app
from paymanager.application.context import Payments
from paymanager.application.services.use_cases import create_service
from paymanager.application.webhooks.address_guard import system_resolver
from paymanager.sandbox.merchant import MerchantReceiver
from tests.integration.payments.conftest import FixedClock, build_components
from tests.support.signed_client import SignedClient
from tests.support.waiting import wait_until


@dataclass
class Resolver:
    """Names the test decides (`names`), everything else as the system resolves it."""

    names: dict[str, list[str]] = field(default_factory=dict)

    async def __call__(self, host: str, port: int) -> list[str]:
        if host in self.names:
            return list(self.names[host])
        return await system_resolver(host, port)


@dataclass
class Hooks:
    components: bootstrap.Components
    payments: Payments
    clock: FixedClock
    admin: SignedClient
    shop: SignedClient
    receiver: MerchantReceiver
    receiver_url: str
    resolver: Resolver
    pool: asyncpg.Pool

    async def endpoint(
        self, path: str, *, types: list[str] | None = None, mode: str = "ok", host: str | None = None
    ) -> tuple[str, str]:
        """Register an endpoint of the shop on the receiver's `path`; returns (id, secret)."""
        base = self.receiver_url if host is None else self.receiver_url.replace("127.0.0.1", host)
        response = await self.shop.post(
            "/webhook-endpoints", {"url": base + path, "event_types": types or ["*"]}
        )
        assert response.status_code == 201, response.text
        body = response.json()
        self.receiver.set_path(path, mode=mode, secrets=[body["secret"]])
        return body["id"], body["secret"]

    async def settled_intent(self, amount: int = 1_000) -> str:
        """An internal-p2p intent of the shop, settled by the worker (events created, confirmed, settled)."""
        payer = await self.shop.open_account()
        payee = await self.shop.open_account()
        funding = await self.admin.fund(payer, amount * 10)
        await self.wait_status(funding["id"], "settled")
        body = {"channel": "internal-p2p", "amount": amount, "currency": "THB",
                "payer_account_id": payer, "payee_account_id": payee}  # fmt: skip
        created = await self.shop.post("/intents", body)
        assert created.status_code == 201, created.text
        intent_id: str = created.json()["id"]
        confirmed = await self.shop.post(f"/intents/{intent_id}/confirm")
        assert confirmed.status_code == 200, confirmed.text
        await self.wait_status(intent_id, "settled")
        return intent_id

    async def wait_status(self, intent_id: str, status: str) -> None:
        async def reached() -> bool:
            row = await self.pool.fetchval("SELECT status FROM intent WHERE id = $1", uuid.UUID(intent_id))
            return bool(row == status)

        await wait_until(reached)

    async def wait_finished(self, endpoint_id: str, count: int, status: str = "succeeded") -> None:
        """Until `count` deliveries of the endpoint are in `status` (their rows, not only the receiver)."""

        async def done() -> bool:
            rows = await self.deliveries(endpoint_id)
            return len([r for r in rows if r["status"] == status]) >= count

        await wait_until(done)

    async def deliveries(self, endpoint_id: str) -> list[asyncpg.Record]:
        return await self.pool.fetch(
            "SELECT d.*, e.type FROM webhook_delivery d JOIN webhook_event e ON e.id = d.event_id"
            " WHERE d.endpoint_id = $1 ORDER BY d.created_at, e.type",
            endpoint_id,
        )


async def start_hooks(
    pool: asyncpg.Pool, database_url: str, **overrides: object
) -> tuple[Hooks, httpx.AsyncClient]:
    resolver = Resolver()
    values: dict[str, object] = {
        "worker_roles": "api,outbox-worker",
        "webhook_allowed_hosts": "127.0.0.1,localhost",
    } | overrides
    components = await _build(pool, database_url, resolver, values)
    payments = components.payments
    clock = FixedClock()
    payments.clock = clock
    for service in components.services:
        await service.start()
    async with pool.acquire() as conn:
        admin, admin_secret = await create_service(conn, payments.box, "admin", admin=True)
        shop, shop_secret = await create_service(conn, payments.box, "shop", admin=False)
    # The receiver checks signature freshness on the same (injected) clock the sender signs with.
    receiver = MerchantReceiver(clock=lambda: clock().timestamp())
    url = await receiver.start()
    http = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(components)), base_url="http://test"
    )
    hooks = Hooks(
        components, payments, clock, SignedClient(http, admin.id, admin_secret),
        SignedClient(http, shop.id, shop_secret), receiver, url, resolver, pool,
    )  # fmt: skip
    return hooks, http


async def _build(
    pool: asyncpg.Pool, database_url: str, resolver: Resolver, values: dict[str, object]
) -> bootstrap.Components:
    from paymanager.config import Settings
    from paymanager.db.database import Database

    settings = Settings(database_url=database_url, redis_url=None, **values)  # type: ignore[arg-type]
    return await bootstrap.build(
        settings, Database(database_url, pool), process_id="test", reconcile_intents=False, resolver=resolver
    )


async def stop_hooks(hooks: Hooks, http: httpx.AsyncClient) -> None:
    await http.aclose()
    await hooks.receiver.stop()
    for service in reversed(hooks.components.services):
        await service.stop(5)
    await hooks.components.webhook_sender.close()


@pytest.fixture
async def hooks(pool: asyncpg.Pool, database_url: str) -> AsyncIterator[Hooks]:
    started, http = await start_hooks(pool, database_url)
    try:
        yield started
    finally:
        await stop_hooks(started, http)


__all__ = ["Hooks", "build_components", "start_hooks", "stop_hooks"]
