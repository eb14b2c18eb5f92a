"""A real `paymanager run` process, services registered through the CLI, and signing HTTP clients."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import httpx
import pytest

from tests.support.processes import PaymanagerProcess, free_port, paymanager_env, run_cli
from tests.support.signed_client import SignedClient


@dataclass
class Service:
    id: str
    secret: str


def create_service(env: dict[str, str], name: str, *, admin: bool) -> Service:
    result = run_cli(["services", "create", name, *(["--admin"] if admin else [])], env)
    assert result.returncode == 0, result.stdout + result.stderr
    service_id = re.search(r"service_id:\s+(\S+)", result.stdout)
    secret = re.search(r"secret:\s+(\S+)", result.stdout)
    assert service_id is not None
    assert secret is not None
    return Service(service_id.group(1), secret.group(1))


@dataclass
class Server:
    url: str
    env: dict[str, str]
    process: PaymanagerProcess
    admin: Service
    shop: Service


def start_server(database_url: str, roles: str, **env: str) -> tuple[PaymanagerProcess, str, dict[str, str]]:
    port = free_port()
    full = paymanager_env(database_url, WORKER_ROLES=roles, PORT=str(port), HOST="127.0.0.1", **env)
    process = PaymanagerProcess(full)
    process.wait_for_line('"listening"')
    return process, f"http://127.0.0.1:{port}", full


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


def clients(http: httpx.AsyncClient, server: Server) -> tuple[SignedClient, SignedClient]:
    return (
        SignedClient(http, server.admin.id, server.admin.secret),
        SignedClient(http, server.shop.id, server.shop.secret),
    )
