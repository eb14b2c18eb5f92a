"""Payments on a real database: the payment component wired as `bootstrap` wires it, and an in-process
API (real FastAPI app over ASGI) with signing clients for an admin and an ordinary service."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime

import asyncpg
import httpx
import pytest

from paymanager import bootstrap
from paymanager.api.app import create_app
from paymanager.application.context import Payments
from paymanager.application.services.use_cases import create_service
from paymanager.config import Settings
from paymanager.runtime import Runtime, StartupHooks
from tests.integration.payments.signed_client import SignedClient


class FixedClock:
    """A clock the test moves; `None` follows real time."""

    def __init__(self) -> None:
        self.now: datetime | None = None

    def __call__(self) -> datetime:
        return self.now if self.now is not None else datetime.now(UTC)


@dataclass
class Api:
    runtime: Runtime
    payments: Payments
    clock: FixedClock
    admin: SignedClient
    client: SignedClient
    http: httpx.AsyncClient


async def build_runtime(pool: asyncpg.Pool, database_url: str, **overrides: object) -> Runtime:
    settings = Settings(database_url=database_url, redis_url=None, **overrides)  # type: ignore[arg-type]
    runtime = Runtime(settings, hooks=StartupHooks())
    runtime.pool = pool
    runtime.database_url = database_url
    await bootstrap.connect_ledger(runtime)
    await bootstrap.seed_system_accounts(runtime)
    await bootstrap.register_channels(runtime)
    return runtime


@pytest.fixture
async def payments(pool: asyncpg.Pool, database_url: str) -> Payments:
    return bootstrap.payments_of(await build_runtime(pool, database_url))


@pytest.fixture
async def api(pool: asyncpg.Pool, database_url: str) -> AsyncIterator[Api]:
    runtime = await build_runtime(pool, database_url)
    payments = bootstrap.payments_of(runtime)
    clock = FixedClock()
    payments.clock = clock
    services = await bootstrap.api_services(runtime)
    for service in services:
        await service.start()
    app = create_app(runtime)
    async with pool.acquire() as conn:
        admin, admin_secret = await create_service(conn, payments.box, "admin", admin=True)
        plain, plain_secret = await create_service(conn, payments.box, "shop", admin=False)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        yield Api(
            runtime, payments, clock, SignedClient(http, admin.id, admin_secret),
            SignedClient(http, plain.id, plain_secret), http,
        )  # fmt: skip
    for service in reversed(services):
        await service.stop(5)
