"""PSP payouts on a real database against the sandbox PSP over real HTTP: a process's components with
the api, outbox-worker and psp-worker roles, started in the test process."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import asyncpg
import httpx
import pytest

from paymanager import bootstrap
from paymanager.adapters.secret_box import SecretBox
from paymanager.api.app import create_app
from paymanager.application.context import Payments
from paymanager.application.psp.config import set_config
from paymanager.application.services.use_cases import create_service
from tests.integration.payments.conftest import build_components
from tests.support.psp_sandboxes import Sandbox, psp_sandbox, psp_sandbox_server  # noqa: F401
from tests.support.signed_client import SignedClient
from tests.support.waiting import wait_until

TERMINAL = {"settled", "failed", "cancelled", "expired"}


@dataclass
class PayoutApi:
    components: bootstrap.Components
    payments: Payments
    admin: SignedClient
    client: SignedClient
    http: httpx.AsyncClient
    sandbox: Sandbox

    async def funded_account(self, amount: int = 1_000_000) -> str:
        account = await self.client.open_account()
        funding = await self.admin.fund(account, amount)
        await self.wait_status(str(funding["id"]), {"settled"})
        return account

    async def payout(
        self, payer: str, amount: int = 1_000, *, channel: str = "ipps-transfer", **metadata: Any
    ) -> str:
        """A payout (ipps-transfer unless `channel` says another) created and confirmed: its id."""
        created = await self.client.post(
            "/intents",
            {"channel": channel, "amount": amount, "currency": "THB", "payer_account_id": payer,
             "metadata": metadata or {"beneficiary_account": "1234567890"}},
        )  # fmt: skip
        assert created.status_code == 201, created.text
        confirmed = await self.client.post(f"/intents/{created.json()['id']}/confirm")
        assert confirmed.status_code == 200, confirmed.text
        return str(created.json()["id"])

    async def intent(self, intent_id: str) -> dict[str, Any]:
        response = await self.admin.get(f"/intents/{intent_id}")
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result

    async def wait_status(self, intent_id: str, statuses: set[str]) -> dict[str, Any]:
        found: dict[str, Any] = {}

        async def reached() -> bool:
            found.update(await self.intent(intent_id))
            return found["status"] in statuses

        await wait_until(reached, timeout_s=30)
        return found

    async def wait_psp_state(self, intent_id: str, states: set[str]) -> dict[str, Any]:
        found: dict[str, Any] = {}

        async def reached() -> bool:
            found.update(await self.intent(intent_id))
            return found.get("psp") is not None and found["psp"]["state"] in states

        await wait_until(reached, timeout_s=30)
        return found

    async def tx(self, intent_id: str) -> asyncpg.Record:
        async with self.payments.pool.acquire() as conn:
            row = await conn.fetchrow("SELECT * FROM psp_tx WHERE intent_id = $1", uuid.UUID(intent_id))
        assert row is not None
        return row


StartPayoutApi = Callable[..., Awaitable[PayoutApi]]


@pytest.fixture
async def start_payout_api(
    pool: asyncpg.Pool,
    database_url: str,
    psp_sandbox: Sandbox,  # noqa: F811
) -> AsyncIterator[StartPayoutApi]:
    """`await start(**settings)`: the sandbox configured as every PSP, the components built with
    the settings given (over quick test defaults) and started, and signing clients."""
    started: list[tuple[bootstrap.Components, httpx.AsyncClient]] = []

    async def start(**overrides: object) -> PayoutApi:
        box = SecretBox.from_config(None)
        for name in ("ipps", "qp", "wise"):
            await set_config(pool, box, name, psp_sandbox.config(name, timeout_ms=2_000))
        values: dict[str, object] = {
            "worker_roles": "api,outbox-worker,psp-worker",
            "psp_poll_interval_ms": 20,
            "psp_max_retries": 3,
            "outbox_interval_ms": 50,
        } | overrides
        components = await build_components(pool, database_url, **values)
        for service in components.services:
            await service.start()
        app = create_app(components)
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")
        started.append((components, http))
        async with pool.acquire() as conn:
            suffix = f"-{len(started)}" if len(started) > 1 else ""
            admin, admin_secret = await create_service(
                conn, components.payments.box, f"admin{suffix}", admin=True
            )
            plain, plain_secret = await create_service(
                conn, components.payments.box, f"shop{suffix}", admin=False
            )
        return PayoutApi(
            components, components.payments, SignedClient(http, admin.id, admin_secret),
            SignedClient(http, plain.id, plain_secret), http, psp_sandbox,
        )  # fmt: skip

    yield start
    for components, http in reversed(started):
        await http.aclose()
        for service in reversed(components.services):
            await service.stop(5)
        await components.close()


@pytest.fixture
async def payouts(start_payout_api: StartPayoutApi) -> PayoutApi:
    return await start_payout_api()
