"""End to end over HTTP against real processes: money moves, cancels, refusals, events, the CLI."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest
import redis.asyncio as aioredis
from redis.asyncio.client import PubSub

from tests.support.processes import PaymanagerProcess, run_cli
from tests.support.servers import Server, clients, create_service, start_server
from tests.support.signed_client import SignedClient

pytestmark = pytest.mark.slow


async def wait_status(
    client: SignedClient, intent_id: str, status: str, timeout_s: float = 15
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        body: dict[str, Any] = (await client.get(f"/intents/{intent_id}")).json()
        if body["status"] == status or time.monotonic() > deadline:
            assert body["status"] == status, body
            return body
        await asyncio.sleep(0.05)


def p2p(payer: str, payee: str, amount: int) -> dict[str, object]:
    return {
        "channel": "internal-p2p", "amount": amount, "currency": "THB",
        "payer_account_id": payer, "payee_account_id": payee,
    }  # fmt: skip


async def test_fund_then_p2p_settles_with_the_right_balances(server: Server, http: httpx.AsyncClient) -> None:
    admin, shop = clients(http, server)
    payer, payee = await shop.open_account(), await shop.open_account()
    funding = await admin.fund(payer, 50_000)
    await wait_status(admin, funding["id"], "settled")
    quote = (
        await shop.post("/intents/quote", {"channel": "internal-p2p", "amount": 10_000, "currency": "THB"})
    ).json()
    created = await shop.post("/intents", p2p(payer, payee, 10_000))
    assert created.status_code == 201, created.text
    confirmed = await shop.post(f"/intents/{created.json()['id']}/confirm")
    assert confirmed.status_code == 200, confirmed.text
    await wait_status(shop, created.json()["id"], "settled")
    assert (await shop.balance(payer))["posted"] == 50_000 - quote["total"]
    assert (await shop.balance(payee))["posted"] == 10_000
    assert (await shop.balance(payer))["pending"] == 0


async def test_cancel_before_confirm_and_insufficient_funds_change_nothing(
    server: Server, http: httpx.AsyncClient
) -> None:
    admin, shop = clients(http, server)
    payer, payee = await shop.open_account(), await shop.open_account()
    await wait_status(admin, (await admin.fund(payer, 1_000))["id"], "settled")
    created = await shop.post("/intents", p2p(payer, payee, 500))
    cancelled = await shop.post(f"/intents/{created.json()['id']}/cancel")
    assert cancelled.json()["status"] == "cancelled"
    too_much = await shop.post("/intents", p2p(payer, payee, 5_000))
    refused = await shop.post(f"/intents/{too_much.json()['id']}/confirm")
    assert refused.status_code == 422
    assert refused.json()["error"]["code"] == "insufficient_funds"
    assert (await shop.balance(payer))["available"] == 1_000
    assert (await shop.balance(payee))["posted"] == 0


async def test_cancel_after_confirm_voids_the_hold(api_only_server: Server) -> None:
    """The api runs alone, so a confirmed p2p intent stays confirmed until it is cancelled; an
    outbox worker is started only to settle the top-up first."""
    async with httpx.AsyncClient(base_url=api_only_server.url, timeout=10) as http:
        admin, shop = clients(http, api_only_server)
        payer, payee = await shop.open_account(), await shop.open_account()
        funding = await admin.fund(payer, 2_000)
        worker = PaymanagerProcess(api_only_server.env | {"WORKER_ROLES": "outbox-worker"})
        try:
            await wait_status(admin, funding["id"], "settled", timeout_s=30)
        finally:
            assert worker.terminate() == 0, worker.output
            worker.close()
        created = await shop.post("/intents", p2p(payer, payee, 1_500))
        confirmed = await shop.post(f"/intents/{created.json()['id']}/confirm")
        assert confirmed.json()["status"] == "confirmed"
        assert (await shop.balance(payer))["available"] < 500
        voided = await shop.post(f"/intents/{created.json()['id']}/cancel")
        assert voided.json()["status"] == "cancelled"
        assert await shop.balance(payer) == {
            "account_id": payer, "ledger_account_id": str(uuid.UUID(payer).int),
            "currency": "THB", "posted": 2_000, "pending": 0, "available": 2_000,
        }  # fmt: skip
        assert (await shop.balance(payee))["posted"] == 0


async def _sse_events(http: httpx.AsyncClient, client: SignedClient, intent_id: str, out: list[str]) -> None:
    path = f"/intents/{intent_id}/events"
    headers = client.headers_for("GET", path, b"")
    async with http.stream("GET", path, headers=headers, timeout=20) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                event = orjson.loads(line[5:].strip())
                out.append(event["status"])
                if event["status"] in {"settled", "failed", "cancelled"}:
                    return


async def _wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not come within {timeout_s}s"
        await asyncio.sleep(0.01)


async def _subscribed(pubsub: PubSub, timeout_s: float = 10) -> None:
    """Until Redis confirms the subscription: `psubscribe` returns once the command is sent."""
    deadline = time.monotonic() + timeout_s
    while (message := await pubsub.get_message(timeout=1)) is None or message["type"] != "psubscribe":
        assert time.monotonic() < deadline, f"no subscription confirmed within {timeout_s}s"


async def test_sse_and_redis_receive_every_status_change(
    server: Server, http: httpx.AsyncClient, redis_url: str
) -> None:
    admin, shop = clients(http, server)
    payer, payee = await shop.open_account(), await shop.open_account()
    await wait_status(admin, (await admin.fund(payer, 5_000))["id"], "settled")
    redis = aioredis.from_url(redis_url)
    pubsub = redis.pubsub()
    await pubsub.psubscribe("intent.*")
    try:
        await _subscribed(pubsub)
        created = await shop.post("/intents", p2p(payer, payee, 1_000))
        intent_id = created.json()["id"]
        seen_sse: list[str] = []
        sse = asyncio.create_task(_sse_events(http, shop, intent_id, seen_sse))
        # The stream's first event is the state it read when it started: confirming before then
        # would make that first event "confirmed" (a fixed sleep here lost that race under load).
        await _wait_for(lambda: bool(seen_sse) or sse.done(), "the stream's first event")
        await shop.post(f"/intents/{intent_id}/confirm")
        await asyncio.wait_for(sse, timeout=20)
        seen_redis: list[str] = []
        deadline = time.monotonic() + 10
        while "settled" not in seen_redis and time.monotonic() < deadline:
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1)
            if message and message["channel"].decode() == f"intent.{intent_id}":
                seen_redis.append(orjson.loads(message["data"])["status"])
    finally:
        await pubsub.aclose()
        await redis.aclose()
    assert seen_sse == ["created", "confirmed", "settled"]
    assert seen_redis == ["created", "confirmed", "settled"]


def test_call_command_signs_a_request_from_the_shell(server: Server) -> None:
    env = server.env | {
        "PAYMANAGER_SERVICE_ID": server.shop.id, "PAYMANAGER_SERVICE_SECRET": server.shop.secret,
        "PAYMANAGER_URL": server.url,
    }  # fmt: skip
    created = run_cli(["call", "POST", "/accounts", '{"kind": "user", "currency": "THB"}'], env)
    assert created.returncode == 0, created.stdout + created.stderr
    account = orjson.loads(created.stdout)
    fetched = run_cli(["call", "GET", f"/accounts/{account['id']}/balance"], env)
    assert orjson.loads(fetched.stdout)["posted"] == 0
    signed = run_cli(["sign", "GET", "/intents"], env)
    assert "X-Signature: " in signed.stdout
    unsigned = httpx.get(server.url + "/intents", timeout=5)
    assert unsigned.status_code == 401


async def test_sigterm_ends_open_event_streams_instead_of_waiting_for_them(
    database_url: str, redis_url: str
) -> None:
    """A stream of an intent that never finishes must not hold shutdown until SHUTDOWN_TIMEOUT_MS."""
    process, url, env = start_server(database_url, "api", REDIS_URL=redis_url, SHUTDOWN_TIMEOUT_MS="120000")
    try:
        shop = create_service(env, "sse-shop", admin=False)
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            client = SignedClient(http, shop.id, shop.secret)
            payer, payee = await client.open_account(), await client.open_account()
            created = await client.post("/intents", p2p(payer, payee, 10))
            path = f"/intents/{created.json()['id']}/events"
            async with http.stream("GET", path, headers=client.headers_for("GET", path, b"")) as response:
                lines = response.aiter_lines()
                while not (await anext(lines)).startswith("data:"):
                    pass
                process.proc.terminate()
                async for _ in lines:
                    pass  # The server ends the stream; without the fix this blocks for two minutes.
        # Far below SHUTDOWN_TIMEOUT_MS: a stream that held shutdown would exceed it.
        assert process.proc.wait(timeout=60) == 0
    finally:
        process.close()
