"""Payments on a real database: the payment component wired as `bootstrap` wires it, and an in-process
API (real FastAPI app over ASGI) with signing clients for an admin and an ordinary service."""

from __future__ import annotations

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
async def payments(pool: asyncpg.Pool, database_url: str, ledger_settings: dict[str, object]) -> Payments:
    return (await build_components(pool, database_url, **ledger_settings)).payments


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


# The payments tests that move money run once per ledger backend: a module's `pytestmark` (or a
# test's mark) `both_ledgers` parametrises its `ledger_backend` with postgres and tigerbeetle, the
# latter on the TigerBeetle replica of the test process (tests/conftest.py). Other tests (signing,
# the API's contract, PostgreSQL storage mechanics) run on the PostgreSQL ledger alone.
BACKENDS = ("postgres", "tigerbeetle")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "ledger_backend" not in metafunc.fixturenames:
        return
    if metafunc.definition.get_closest_marker("both_ledgers") is None:
        return
    # A test marked postgres_ledger_only (its reason is the marker's argument) is about the PostgreSQL
    # ledger's own mechanics: it gets no TigerBeetle run at all, rather than a skipped one.
    only = metafunc.definition.get_closest_marker("postgres_ledger_only")
    backends = [pytest.param("postgres", id="postgres")]
    if only is None:
        backends.append(pytest.param("tigerbeetle", id="tigerbeetle"))
    metafunc.parametrize("ledger_backend", backends, indirect=True)


@pytest.fixture
def ledger_backend(request: pytest.FixtureRequest) -> str:
    """The backend of this test's payments: postgres unless `both_ledgers` parametrises it."""
    backend: str = getattr(request, "param", "postgres")
    assert backend in BACKENDS, backend
    return backend


@pytest.fixture
def ledger_settings(request: pytest.FixtureRequest, ledger_backend: str) -> dict[str, object]:
    """The settings that put a process's payments on this test's ledger backend."""
    if ledger_backend == "postgres":
        return {}
    return {"ledger_backend": "tigerbeetle", "tb_address": request.getfixturevalue("tigerbeetle_address")}


@pytest.fixture
async def api(
    pool: asyncpg.Pool, database_url: str, ledger_settings: dict[str, object]
) -> AsyncIterator[Api]:
    async for opened in open_api(pool, database_url, **ledger_settings):
        yield opened
