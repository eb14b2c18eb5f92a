"""Real `paymanager` servers for end-to-end tests: started on a free port, services registered through
the CLI, signing clients, and a confirmed intent (with a peer holding its row) to work on."""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from dataclasses import dataclass

import asyncpg
import httpx

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


def clients(http: httpx.AsyncClient, server: Server) -> tuple[SignedClient, SignedClient]:
    return (
        SignedClient(http, server.admin.id, server.admin.secret),
        SignedClient(http, server.shop.id, server.shop.secret),
    )


async def confirmed_intent(database_url: str) -> str:
    """An admin-transfer confirmed by an api-only process: its settle job waits in `outbox`."""
    api, url, env = start_server(database_url, "api")
    try:
        service = create_service(env, "e2e-admin", admin=True)
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:
            boss = SignedClient(http, service.id, service.secret)
            account = await boss.open_account()
            return str((await boss.fund(account, 1_000))["id"])
    finally:
        assert api.terminate() == 0, api.output
        api.close()


async def lock_intent(database_url: str, intent_id: str) -> tuple[asyncpg.Connection, object]:
    """A peer transaction holding the intent's row lock (as a long confirm/settle/cancel would)."""
    locker = await asyncpg.connect(database_url)
    tx = locker.transaction()
    await tx.start()
    await locker.execute("SELECT 1 FROM intent WHERE id = $1 FOR UPDATE", uuid.UUID(intent_id))
    return locker, tx


async def wait_job_state(conn: asyncpg.Connection, kind: str, state: str, timeout_s: float = 15) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await conn.fetchval("SELECT state FROM job WHERE kind = $1", kind) == state:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"job {kind} never reached {state}")
