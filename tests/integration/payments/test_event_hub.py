"""The API's intent event hub: one LISTEN connection routing intent events to their subscribers, which
listens again after that connection is lost, however it is lost."""

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
from tests.integration.payments.conftest import Api
from tests.support.waiting import wait_until


def _hub(api: Api) -> IntentEventHub:
    hub: IntentEventHub = api.app.state.event_hub
    return hub


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
    InterfaceError ("connection is closed"). The hub's reconnect task must survive it and try again,
    or no termination listener is left to start another and subscribers hear nothing ever again."""
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

            async def closed() -> bool:
                return conn.is_closed()

            await wait_until(closed)  # the hub gets a connection already closed under it
        return conn

    monkeypatch.setattr(database_module, "connect", connect_then_die)
    intent_id = str(uuid.uuid4())
    queue = hub.subscribe(intent_id)
    assert await _kill_hub_connection(pool) == 1
    delivered = await _delivered(pool, queue, intent_id)
    task = api.components.database.listener._task
    died = task.exception() if task is not None and task.done() and not task.cancelled() else None
    assert delivered, f"the hub never listened again; its reconnect task died of {died!r}"
