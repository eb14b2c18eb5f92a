"""Payments on a real database: the payment component wired as `bootstrap` wires it, and an in-process
API (real FastAPI app over ASGI) with signing clients for an admin and an ordinary service."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime

import asyncpg
import httpx
import pytest
from fastapi import FastAPI

from paymanager import bootstrap
from paymanager.api.app import create_app
from paymanager.application.context import Payments
from paymanager.application.services.use_cases import create_service
from paymanager.config import Settings
from paymanager.db.database import Database
from tests.support.signed_client import SignedClient


class FixedClock:
    """A clock the test moves; `None` follows real time."""

    def __init__(self) -> None:
        self.now: datetime | None = None

    def __call__(self) -> datetime:
        return self.now if self.now is not None else datetime.now(UTC)


@dataclass
class Api:
    components: bootstrap.Components
    payments: Payments
    clock: FixedClock
    admin: SignedClient
    client: SignedClient
    http: httpx.AsyncClient
    app: FastAPI


async def build_components(
    pool: asyncpg.Pool, database_url: str, **overrides: object
) -> bootstrap.Components:
    """The components of a process with the roles of `overrides` (default: api alone), built on the
    test's pool without reconciling intents; nothing started."""
    values: dict[str, object] = {"worker_roles": "api"} | overrides
    settings = Settings(database_url=database_url, redis_url=None, **values)  # type: ignore[arg-type]
    return await bootstrap.build(
        settings, Database(database_url, pool), process_id="test", reconcile_intents=False
    )


@pytest.fixture
async def payments(request: pytest.FixtureRequest, pool: asyncpg.Pool, database_url: str) -> Payments:
    return (await build_components(pool, database_url, **ledger_overrides(request))).payments


async def open_api(pool: asyncpg.Pool, database_url: str, **overrides: object) -> AsyncIterator[Api]:
    """An in-process API on components built with `overrides` (e.g. the TigerBeetle ledger)."""
    components = await build_components(pool, database_url, **overrides)
    payments = components.payments
    clock = FixedClock()
    payments.clock = clock
    services = components.services
    for service in services:
        await service.start()
    app = create_app(components)
    async with pool.acquire() as conn:
        admin, admin_secret = await create_service(conn, payments.box, "admin", admin=True)
        plain, plain_secret = await create_service(conn, payments.box, "shop", admin=False)
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            yield Api(
                components, payments, clock, SignedClient(http, admin.id, admin_secret),
                SignedClient(http, plain.id, plain_secret), http, app,
            )  # fmt: skip
    finally:
        for service in reversed(services):
            await service.stop(5)
        await components.close()


# TEST_LEDGER_BACKEND=tigerbeetle runs the payments tests on a TigerBeetle replica of the test
# process (tests/conftest.py); unset, on the PostgreSQL ledger.
LEDGER_BACKEND = os.environ.get("TEST_LEDGER_BACKEND", "postgres")


def postgres_ledger_only(why: str) -> None:
    """Skip a test of the PostgreSQL ledger's own mechanics when the suite runs on TigerBeetle."""
    if LEDGER_BACKEND == "tigerbeetle":
        pytest.skip(f"PostgreSQL ledger only: {why}")


def ledger_overrides(request: pytest.FixtureRequest) -> dict[str, object]:
    if LEDGER_BACKEND != "tigerbeetle":
        return {}
    return {"ledger_backend": "tigerbeetle", "tb_address": request.getfixturevalue("tigerbeetle_address")}


@pytest.fixture
async def api(request: pytest.FixtureRequest, pool: asyncpg.Pool, database_url: str) -> AsyncIterator[Api]:
    async for opened in open_api(pool, database_url, **ledger_overrides(request)):
        yield opened
