"""Fixtures: a real `paymanager run` process (api and outbox worker, or api alone) with an admin and a
shop service registered through the CLI, and an HTTP client to it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from tests.support.servers import Server, create_service, start_server


def server_fixture(roles: str, **env: str) -> object:
    @pytest.fixture
    def fixture(database_url: str, redis_url: str) -> Iterator[Server]:
        process, url, full = start_server(database_url, roles, REDIS_URL=redis_url, **env)
        try:
            admin = create_service(full, "e2e-admin", admin=True)
            shop = create_service(full, "e2e-shop", admin=False)
            yield Server(url, full, process, admin, shop)
        finally:
            assert process.terminate() == 0, process.output
            process.close()

    return fixture


server = server_fixture("api,outbox-worker")
api_only_server = server_fixture("api")


@pytest.fixture
async def http(server: Server) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        yield client
