"""Deduplication keys: a throttle holds its key for a time whatever its job's state; a debounce
gives a still-waiting job the newest payload, priority and delay (docs/state_machines.md, "Deduplication")."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import asyncpg
import pytest

from paymanager.jobs import Dedup, InvalidJobError, JobContext, QueueFullError, Registry, admin, enqueue
from paymanager.jobs._store import dedup_prune
from tests.integration.jobs.conftest import StartWorker, wait_state


async def test_a_throttle_returns_the_first_job_while_its_key_lives(conn: asyncpg.Connection) -> None:
    first = await enqueue(conn, "k", {"n": 1}, dedup=Dedup("order-1", ttl_ms=60_000))
    second = await enqueue(conn, "k", {"n": 2}, dedup=Dedup("order-1", ttl_ms=60_000))
    assert first.created
    assert not second.created
    assert second.id == first.id
    assert await conn.fetchval("SELECT count(*) FROM job") == 1
    assert await conn.fetchval("SELECT payload FROM job WHERE id = $1", first.id) == {"n": 1}


async def test_a_throttle_holds_its_key_after_its_job_finished_unlike_a_unique_key(
    conn: asyncpg.Connection,
) -> None:
    throttled = await enqueue(conn, "k", {}, dedup=Dedup("t", ttl_ms=60_000))
    unique = await enqueue(conn, "k", {}, unique_key="u")
    await conn.execute("UPDATE job SET state = 'completed', finalized_at = now()")
    again_throttled = await enqueue(conn, "k", {}, dedup=Dedup("t", ttl_ms=60_000))
    again_unique = await enqueue(conn, "k", {}, unique_key="u")
    assert (again_throttled.id, again_throttled.created) == (throttled.id, False)
    assert again_unique.created
    assert again_unique.id != unique.id


async def test_an_expired_throttle_key_lets_a_new_job_in(conn: asyncpg.Connection) -> None:
    first = await enqueue(conn, "k", {}, dedup=Dedup("t", ttl_ms=60_000))
    await conn.execute("UPDATE job_dedup SET expires_at = now() - interval '1 second'")
    second = await enqueue(conn, "k", {}, dedup=Dedup("t", ttl_ms=60_000))
    assert second.created
    assert second.id != first.id
    assert await conn.fetchval("SELECT job_id FROM job_dedup WHERE key = 't'") == second.id


async def test_a_debounce_replaces_the_waiting_jobs_payload_and_delay(conn: asyncpg.Connection) -> None:
    first = await enqueue(conn, "k", {"n": 1}, delay_ms=60_000, dedup=Dedup("d", 60_000, debounce=True))
    run_at_before = await conn.fetchval("SELECT run_at FROM job WHERE id = $1", first.id)
    second = await enqueue(conn, "k", {"n": 2}, delay_ms=120_000, dedup=Dedup("d", 60_000, debounce=True))
    assert (second.id, second.created, second.replaced) == (first.id, False, True)
    row = await conn.fetchrow("SELECT payload, run_at, state FROM job WHERE id = $1", first.id)
    assert row is not None
    assert row["payload"] == {"n": 2}
    assert row["state"] == "scheduled"
    assert row["run_at"] - run_at_before >= timedelta(seconds=59)
    assert await conn.fetchval("SELECT count(*) FROM job") == 1


async def test_a_debounce_replaces_the_waiting_jobs_priority(conn: asyncpg.Connection) -> None:
    first = await enqueue(conn, "k", {"n": 1}, priority=5, dedup=Dedup("p", 60_000, debounce=True))
    other = await enqueue(conn, "k", {})
    second = await enqueue(conn, "k", {"n": 2}, priority=-3, dedup=Dedup("p", 60_000, debounce=True))
    assert (second.id, second.replaced) == (first.id, True)
    assert await conn.fetchval("SELECT priority FROM job WHERE id = $1", first.id) == -3
    # The newest priority decides the order: the debounced job now runs before the other one.
    order = await conn.fetch("SELECT id FROM job WHERE state = 'available' ORDER BY priority, run_at, id")
    assert [r["id"] for r in order] == [first.id, other.id]


async def test_a_lifo_debounce_puts_the_waiting_job_first(conn: asyncpg.Connection) -> None:
    other = await enqueue(conn, "k", {})
    first = await enqueue(conn, "k", {"n": 1}, dedup=Dedup("l", 60_000, debounce=True))
    await enqueue(conn, "k", {"n": 2}, lifo=True, dedup=Dedup("l", 60_000, debounce=True))
    order = await conn.fetch("SELECT id FROM job WHERE state = 'available' ORDER BY priority, run_at, id")
    assert [r["id"] for r in order] == [first.id, other.id]


async def test_a_debounce_with_no_delay_makes_the_job_available(conn: asyncpg.Connection) -> None:
    first = await enqueue(conn, "k", {"n": 1}, delay_ms=60_000, dedup=Dedup("d", 60_000, debounce=True))
    await enqueue(conn, "k", {"n": 2}, dedup=Dedup("d", 60_000, debounce=True))
    assert await conn.fetchval("SELECT state FROM job WHERE id = $1", first.id) == "available"


async def test_a_debounce_whose_job_started_enqueues_a_new_job(conn: asyncpg.Connection) -> None:
    first = await enqueue(conn, "k", {"n": 1}, dedup=Dedup("d", 60_000, debounce=True))
    await conn.execute(
        "UPDATE job SET state = 'running', lease_owner = 'w', lease_token = gen_random_uuid(),"
        " lease_expires_at = now() + interval '1 minute' WHERE id = $1",
        first.id,
    )
    second = await enqueue(conn, "k", {"n": 2}, dedup=Dedup("d", 60_000, debounce=True))
    assert second.created
    assert second.id != first.id
    assert await conn.fetchval("SELECT payload FROM job WHERE id = $1", first.id) == {"n": 1}


async def test_concurrent_throttled_enqueues_write_one_job(pool: asyncpg.Pool) -> None:
    async def one(n: int) -> int:
        async with pool.acquire() as c:
            return (await enqueue(c, "k", {"n": n}, dedup=Dedup("race", 60_000))).id

    ids = await asyncio.gather(*(one(n) for n in range(8)))
    assert len(set(ids)) == 1
    assert await pool.fetchval("SELECT count(*) FROM job") == 1


async def test_a_job_refused_by_a_full_queue_leaves_the_key_free(conn: asyncpg.Connection) -> None:
    await admin.set_max_depth(conn, "small", 1)
    await enqueue(conn, "k", {}, queue="small")
    with pytest.raises(QueueFullError):
        await enqueue(conn, "k", {}, queue="small", dedup=Dedup("free", 60_000))
    assert await conn.fetchval("SELECT count(*) FROM job_dedup") == 0


async def test_expired_keys_are_pruned(conn: asyncpg.Connection) -> None:
    await enqueue(conn, "k", {}, dedup=Dedup("old", 60_000))
    await enqueue(conn, "k", {}, dedup=Dedup("live", 60_000))
    await conn.execute("UPDATE job_dedup SET expires_at = now() - interval '1 second' WHERE key = 'old'")
    assert await dedup_prune(conn, batch_max=100) == 1
    assert await conn.fetchval("SELECT array_agg(key) FROM job_dedup") == ["live"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dedup": Dedup("k", 1_000), "unique_key": "u"}, "not both"),
        ({"dedup": Dedup("k", 1_000), "parent_id": 1}, "child"),
    ],
)
async def test_bad_deduplication_options_are_refused(
    conn: asyncpg.Connection, kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidJobError, match=message):
        await enqueue(conn, "k", {}, **kwargs)  # type: ignore[arg-type]
    assert await conn.fetchval("SELECT count(*) FROM job") == 0


def test_a_bad_key_or_ttl_is_refused() -> None:
    with pytest.raises(InvalidJobError):
        Dedup("", 1_000)
    with pytest.raises(InvalidJobError):
        Dedup("k", 0)


async def test_a_debounced_job_runs_once_with_the_newest_payload(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    seen: list[dict[str, object]] = []
    registry = Registry()

    async def handle(ctx: JobContext) -> None:
        seen.append(ctx.payload)

    registry.register("k", handle)
    async with pool.acquire() as c:
        for n in range(5):
            result = await enqueue(c, "k", {"n": n}, delay_ms=300, dedup=Dedup("d", 60_000, debounce=True))
    await start_worker(registry)
    await wait_state(pool, result.id, "completed")
    assert seen == [{"n": 4}]
