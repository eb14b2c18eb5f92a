"""One Database per process: every LISTEN user shares its one connection, which comes back when it dies."""

from __future__ import annotations

import asyncio

import asyncpg
import orjson

from paymanager.application.intents.event_hub import IntentEventHub
from paymanager.application.intents.events import NOTIFY_CHANNEL
from paymanager.db.database import Database
from paymanager.jobs import EventStream, Registry, Worker, WorkerOptions, enqueue
from tests.integration.jobs.conftest import wait_state, wait_until

LISTEN_CONNECTIONS = """
    SELECT pid FROM pg_stat_activity
     WHERE application_name = 'paymanager:listen' AND datname = current_database()
"""
# No polling: a job can only start through a NOTIFY the worker heard.
NO_POLL = WorkerOptions(owner="db-test", poll_interval_ms=3_600_000, listener_check_interval_ms=200)


async def _listen_pids(pool: asyncpg.Pool) -> list[int]:
    return [row["pid"] for row in await pool.fetch(LISTEN_CONNECTIONS)]


async def _hub_hears(pool: asyncpg.Pool, hub: IntentEventHub, intent_id: str) -> bool:
    queue = hub.subscribe(intent_id)
    try:
        payload = orjson.dumps({"intent_id": intent_id, "version": 1, "status": "created"}).decode()
        await pool.execute("SELECT pg_notify($1, $2)", NOTIFY_CHANNEL, payload)
        event = await asyncio.wait_for(queue.get(), 10)
        return event["intent_id"] == intent_id
    finally:
        hub.unsubscribe(intent_id, queue)


def _registry() -> Registry:
    registry = Registry()
    registry.register("k", lambda ctx: None)
    return registry


async def test_the_worker_the_event_hub_and_job_events_share_one_listen_connection(
    pool: asyncpg.Pool, database_url: str
) -> None:
    database = Database(database_url, pool)
    hub = IntentEventHub(database)
    worker = Worker(pool, database, _registry(), {"default": 2}, NO_POLL)
    await hub.start()
    await worker.start()
    try:
        async with EventStream(database) as events:
            assert len(await _listen_pids(pool)) == 1
            assert await _hub_hears(pool, hub, "i-1")
            job = await enqueue(pool, "k", {})
            await wait_state(pool, job.id, "completed")
            seen = await events.next(10)
            assert (seen.event, seen.id) == ("completed", job.id)
    finally:
        await worker.stop(5)
        await hub.stop(5)
    # The last subscriber out closed it.
    assert await _listen_pids(pool) == []


async def test_a_killed_listen_connection_comes_back_for_every_subscriber(
    pool: asyncpg.Pool, database_url: str
) -> None:
    database = Database(database_url, pool)
    hub = IntentEventHub(database)
    worker = Worker(pool, database, _registry(), {"default": 2}, NO_POLL)
    await hub.start()
    await worker.start()
    try:
        (old,) = await _listen_pids(pool)
        assert await pool.fetchval("SELECT pg_terminate_backend($1)", old)

        async def reconnected() -> bool:
            return database.listener.reconnects >= 1 and len(await _listen_pids(pool)) == 1

        await wait_until(reconnected)
        assert await _listen_pids(pool) != [old]
        assert await _hub_hears(pool, hub, "i-2")
        job = await enqueue(pool, "k", {})
        await wait_state(pool, job.id, "completed")
    finally:
        await worker.stop(5)
        await hub.stop(5)
