"""Event delivery where a review found it broken (each failing test failed before its fix,
2026-11-29): a flush of failure events with long errors over NOTIFY's 8000-byte limit was lost on
both transports; the intent event hub stopped listening for good when its new connection died
before LISTEN. One passing test guards the hub's plain reconnect."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import asyncpg
import orjson
import pytest

from paymanager.application.intents.event_hub import IntentEventHub
from paymanager.application.intents.events import NOTIFY_CHANNEL
from paymanager.db import database as database_module
from paymanager.jobs import EventStream, JobContext, Registry, Worker, WorkerOptions, enqueue
from tests.integration.payments.conftest import Api


def _hub(api: Api) -> IntentEventHub:
    return api.http._transport.app.state.event_hub  # type: ignore[attr-defined]


def _p2p(payer: str, payee: str, amount: int) -> dict[str, object]:
    return {
        "channel": "internal-p2p", "amount": amount, "currency": "THB",
        "payer_account_id": payer, "payee_account_id": payee,
    }  # fmt: skip


async def _delivered(pool: asyncpg.Pool, queue: asyncio.Queue[dict[str, Any]], intent_id: str) -> bool:
    """NOTIFY an event of `intent_id` until the hub routes one into `queue` (at most 15 s)."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        payload = orjson.dumps({"intent_id": intent_id, "version": 99, "status": "settled"}).decode()
        await pool.execute("SELECT pg_notify($1, $2)", NOTIFY_CHANNEL, payload)
        try:
            await asyncio.wait_for(queue.get(), 0.5)
            return True
        except TimeoutError:
            pass
    return False


async def _kill_hub_connection(pool: asyncpg.Pool) -> int:
    return int(
        await pool.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = 'paymanager:listen' AND datname = current_database()"
        )
    )


# --- the LISTEN connection of the hub -----------------------------------------------------------


async def test_hub_relistens_after_its_connection_is_killed(api: Api) -> None:
    hub = _hub(api)
    intent_id = str(uuid.uuid4())
    queue = hub.subscribe(intent_id)
    assert await _delivered(api.payments.pool, queue, intent_id)
    assert await _kill_hub_connection(api.payments.pool) == 1
    assert await _delivered(api.payments.pool, queue, intent_id), "the hub never listened again"


async def test_hub_relistens_when_its_new_connection_dies_before_listen(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server restart can close the re-opened connection before its LISTEN: asyncpg then raises
    InterfaceError ("connection is closed"), which `_reconnect_loop` does not catch, so the task dies
    and no termination listener is left to start another: subscribers hear nothing ever again."""
    hub = _hub(api)
    pool = api.payments.pool
    real_connect = database_module.connect
    calls = 0

    async def connect_then_die(dsn: str, *, application_name: str) -> asyncpg.Connection:
        nonlocal calls
        conn = await real_connect(dsn, application_name=application_name)
        calls += 1
        if calls == 1:
            await pool.execute("SELECT pg_terminate_backend($1)", conn.get_server_pid())
            await asyncio.sleep(0.3)
        return conn

    monkeypatch.setattr(database_module, "connect", connect_then_die)
    intent_id = str(uuid.uuid4())
    queue = hub.subscribe(intent_id)
    assert await _kill_hub_connection(pool) == 1
    delivered = await _delivered(pool, queue, intent_id)
    task = api.components.database.listener._task
    died = task.exception() if task is not None and task.done() and not task.cancelled() else None
    assert delivered, f"the hub never listened again; its reconnect task died of {died!r}"


# --- job events (EventStream) -------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["notify", "redis"])
async def test_failure_events_of_a_batch_with_long_errors_reach_subscribers(
    pool: asyncpg.Pool, database_url: str, redis_url: str, transport: str
) -> None:
    """A flush of failures publishes up to 60 events per message, each with an error of up to 300
    characters: 20 dead jobs make ~15 kB, past NOTIFY's 8000 bytes; the NOTIFY fails and, in the same
    try, the Redis publish after it is skipped: every event of the batch is lost on both transports."""
    registry = Registry()
    jobs = 20
    running = 0
    outage = asyncio.Event()

    @registry.handler("psp.call", max_attempts=1)
    async def call(ctx: JobContext) -> None:
        nonlocal running
        running += 1
        if running == jobs:
            outage.set()  # the PSP goes down: every call in flight fails at once
        await outage.wait()
        raise RuntimeError("the PSP refused the request: " + "e" * 400)

    ids = {(await enqueue(pool, "psp.call", {"n": n})).id for n in range(jobs)}
    options = WorkerOptions(
        owner="review", lease_ms=2_000, heartbeat_interval_ms=500, poll_interval_ms=200,
        redis_url=redis_url if transport == "redis" else None,
    )  # fmt: skip
    stream = EventStream(database_url) if transport == "notify" else EventStream(redis_url=redis_url)
    async with stream:
        worker = Worker(pool, database_url, registry, {"default": jobs}, options)
        await worker.start()
        try:
            dead: set[int] = set()
            while dead != ids:
                try:
                    event = await stream.next(timeout_s=10)
                except TimeoutError:
                    states = await pool.fetch("SELECT state, count(*) FROM job GROUP BY state")
                    pytest.fail(f"{len(ids - dead)} of {jobs} dead events lost; jobs: {states}")
                if event.event == "dead":
                    dead.add(event.id)
        finally:
            await worker.stop(timeout_s=2)
