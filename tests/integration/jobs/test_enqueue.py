from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from paymanager.jobs import (
    Fixed,
    InvalidJobError,
    NewJob,
    PayloadTooLargeError,
    QueueFullError,
    admin,
    enqueue,
    enqueue_many,
)


async def test_enqueue_writes_an_available_job(conn: asyncpg.Connection) -> None:
    result = await enqueue(conn, "email.send", {"to": "a@example.com"}, queue="mail", priority=5)
    assert result.created
    row = await conn.fetchrow("SELECT * FROM job WHERE id = $1", result.id)
    assert row is not None
    assert (row["state"], row["queue"], row["kind"], row["priority"]) == (
        "available",
        "mail",
        "email.send",
        5,
    )
    assert row["payload"] == {"to": "a@example.com"}


async def test_rolled_back_transaction_leaves_no_job(conn: asyncpg.Connection) -> None:
    class Boom(Exception):
        pass

    async def enqueue_then_fail() -> None:
        async with conn.transaction():
            await enqueue(conn, "k", {"n": 1})
            raise Boom

    with pytest.raises(Boom):
        await enqueue_then_fail()
    assert await conn.fetchval("SELECT count(*) FROM job") == 0


async def test_job_with_future_run_at_or_delay_is_scheduled(conn: asyncpg.Connection) -> None:
    later = await enqueue(conn, "k", {}, run_at=datetime.now(UTC) + timedelta(hours=1))
    delayed = await enqueue(conn, "k", {}, delay_ms=60_000)
    states = await conn.fetch("SELECT state FROM job WHERE id = ANY($1)", [later.id, delayed.id])
    assert {r["state"] for r in states} == {"scheduled"}


async def test_unique_key_returns_the_unfinished_holder(conn: asyncpg.Connection) -> None:
    first = await enqueue(conn, "k", {}, unique_key="settle:42")
    again = await enqueue(conn, "k", {"other": True}, unique_key="settle:42")
    assert again == type(again)(first.id, False)
    await conn.execute("UPDATE job SET state = 'completed', finalized_at = now() WHERE id = $1", first.id)
    fresh = await enqueue(conn, "k", {}, unique_key="settle:42")
    assert fresh.created
    assert fresh.id != first.id


async def test_enqueue_refuses_when_queue_is_at_max_depth(conn: asyncpg.Connection) -> None:
    await admin.set_max_depth(conn, "small", 2)
    await enqueue(conn, "k", {}, queue="small")
    await enqueue(conn, "k", {}, queue="small")
    with pytest.raises(QueueFullError, match="maximum depth"):
        await enqueue(conn, "k", {}, queue="small")
    await enqueue(conn, "k", {}, queue="other")  # other queues are not limited


async def test_enqueue_rejects_bad_fields_before_any_write(conn: asyncpg.Connection) -> None:
    with pytest.raises(InvalidJobError):
        await enqueue(conn, "bad kind!", {})
    with pytest.raises(InvalidJobError):
        await enqueue(conn, "k", {}, priority=5000)
    with pytest.raises(PayloadTooLargeError):
        await enqueue(conn, "k", {"blob": "x" * 2000}, max_payload_bytes=1024)
    assert await conn.fetchval("SELECT count(*) FROM job") == 0


async def test_schema_rejects_a_terminal_job_without_finalized_at(conn: asyncpg.Connection) -> None:
    job = await enqueue(conn, "k", {})
    with pytest.raises(asyncpg.CheckViolationError):
        await conn.execute("UPDATE job SET state = 'completed' WHERE id = $1", job.id)


async def test_enqueue_many_writes_all_jobs_in_order(conn: asyncpg.Connection) -> None:
    jobs = [NewJob("k", {"i": i}, queue="bulk", backoff=Fixed(10)) for i in range(1200)]
    ids = await enqueue_many(conn, jobs)
    assert len(ids) == 1200
    rows = await conn.fetch("SELECT payload FROM job WHERE id = ANY($1) ORDER BY id", ids)
    assert [r["payload"]["i"] for r in rows] == list(range(1200))


async def test_enqueue_many_keeps_each_jobs_own_columns(conn: asyncpg.Connection) -> None:
    # The payloads travel as one JSON array and a column no job sets as NULL: each job must still
    # get its own values, in input order, whichever columns the others set.
    later = datetime.now(UTC) + timedelta(hours=1)
    jobs = [
        NewJob("a", {"nested": {"list": [1, "two", None]}, "text": 'é " \\ \u2028'}, queue="q1"),
        NewJob("b", {}, queue="q2", priority=-3, run_at=later, max_attempts=2, backoff=Fixed(50)),
        NewJob("c", {"i": 3}, queue="q1", timeout_ms=1500),
    ]
    ids = await enqueue_many(conn, jobs)
    rows = {r["id"]: r for r in await conn.fetch("SELECT * FROM job WHERE id = ANY($1)", ids)}
    got = [rows[i] for i in ids]
    assert [r["kind"] for r in got] == ["a", "b", "c"]
    assert [r["payload"] for r in got] == [job.payload for job in jobs]
    assert [r["queue"] for r in got] == ["q1", "q2", "q1"]
    assert [r["priority"] for r in got] == [0, -3, 0]
    assert [r["state"] for r in got] == ["available", "scheduled", "available"]
    assert got[1]["run_at"] == later
    assert [r["max_attempts"] for r in got] == [None, 2, None]
    assert [r["backoff"] is not None for r in got] == [False, True, False]
    assert [r["timeout_ms"] for r in got] == [None, None, 1500]
    # None of the optional columns set, as a bulk caller usually sends: all NULL, all available.
    plain = await enqueue_many(conn, [NewJob("d", {"i": i}) for i in range(3)])
    rows = await conn.fetch(
        "SELECT state, max_attempts, backoff, timeout_ms, payload FROM job WHERE id = ANY($1) ORDER BY id",
        plain,
    )
    assert [tuple(r) for r in rows] == [("available", None, None, None, {"i": i}) for i in range(3)]


async def test_enqueue_many_refuses_a_bad_job_before_writing_its_chunk(conn: asyncpg.Connection) -> None:
    jobs = [NewJob("k", {"i": 1}), NewJob("k", {"i": 2}, priority=5000)]
    with pytest.raises(InvalidJobError, match="priority"):
        await enqueue_many(conn, jobs)
    assert await conn.fetchval("SELECT count(*) FROM job") == 0
