"""While PostgreSQL is down the API answers 503 `database_unavailable` with Retry-After, logs one line
when the outage starts and one when it ends, fails /readyz, and recovers by itself."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import asyncpg
import httpx
import pytest
from structlog.testing import capture_logs

from paymanager.api.app import create_app
from paymanager.application.services.use_cases import create_service
from paymanager.db import migrations
from paymanager.db.pool import create_pool
from tests.integration.payments.conftest import build_components
from tests.support.private_postgres import PrivatePostgres
from tests.support.signed_client import SignedClient

RECOVERY_WAIT_SEC = 60


@pytest.fixture
def private_pg() -> Iterator[PrivatePostgres]:
    server = PrivatePostgres()
    yield server
    server.close()


@pytest.fixture
async def outage_api(private_pg: PrivatePostgres) -> AsyncIterator[tuple[SignedClient, httpx.AsyncClient]]:
    conn = await asyncpg.connect(private_pg.url)
    try:
        await migrations.migrate(conn)
    finally:
        await conn.close()
    pool = await create_pool(private_pg.url, min_size=1, max_size=4)
    components = await build_components(pool, private_pg.url)
    payments = components.payments
    services = components.services
    for service in services:
        await service.start()
    async with pool.acquire() as conn:
        shop, secret = await create_service(conn, payments.box, "shop", admin=False)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(components)), base_url="http://t"
    ) as http:
        yield SignedClient(http, shop.id, secret), http
    for service in reversed(services):
        await service.stop(5)
    pool.terminate()


async def test_a_database_outage_answers_503_logs_twice_and_recovers(
    private_pg: PrivatePostgres, outage_api: tuple[SignedClient, httpx.AsyncClient]
) -> None:
    client, http = outage_api
    assert (await client.get("/intents")).status_code == 200

    with capture_logs() as logs:
        private_pg.stop()
        for _ in range(5):
            response = await client.get("/intents")
            assert response.status_code == 503, response.text
            assert response.json()["error"]["code"] == "database_unavailable"
            assert response.headers["Retry-After"].isdigit()
        created = await client.post("/accounts", {"kind": "user", "currency": "THB"})
        assert created.status_code == 503, created.text
        assert (await http.get("/readyz")).status_code == 503

        private_pg.start()
        async with asyncio.timeout(RECOVERY_WAIT_SEC):
            # The probe, not this test's requests, ends the outage: wait for its line.
            while True:
                if any(entry["event"] == "database reachable again" for entry in logs):
                    break
                await asyncio.sleep(0.2)
        assert (await client.get("/intents")).status_code == 200
        assert (await http.get("/readyz")).status_code == 200

    events = [entry["event"] for entry in logs if entry["log_level"] in ("error", "warning", "info")]
    assert events.count("database unavailable: answering 503 until it is back") == 1
    assert events.count("database reachable again") == 1
    assert "unhandled error" not in events
