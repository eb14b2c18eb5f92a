"""An operator's and a producer's hand on waiting jobs: LIFO, change, promote, remove, drain,
obliterate (docs/state_machines.md, "Waiting jobs")."""

from __future__ import annotations

import asyncpg
import pytest

from paymanager.jobs import (
    EventStream,
    Flow,
    InvalidJobError,
    JobState,
    NewJob,
    admin,
    enqueue,
    enqueue_flow,
)
from paymanager.jobs._store import ClaimParams, claim


async def claim_one(conn: asyncpg.Connection, queue: str = "default") -> int | None:
    claimed = await claim(conn, ClaimParams([queue], [1], "test", 60_000, False))
    return claimed.jobs[0].id if claimed.jobs else None


async def make_running(conn: asyncpg.Connection, job_id: int) -> None:
    await conn.execute(
        "UPDATE job SET state = 'running', lease_owner = 'w', lease_token = gen_random_uuid(),"
        " lease_expires_at = now() + interval '1 minute' WHERE id = $1",
        job_id,
    )


async def test_lifo_jobs_run_before_waiting_ones_newest_first(conn: asyncpg.Connection) -> None:
    a = (await enqueue(conn, "k", {})).id
    b = (await enqueue(conn, "k", {})).id
    c = (await enqueue(conn, "k", {}, lifo=True)).id
    d = (await enqueue(conn, "k", {}, lifo=True)).id
    urgent = (await enqueue(conn, "k", {}, priority=-1)).id
    order = [await claim_one(conn) for _ in range(5)]
    assert order == [urgent, d, c, a, b]


async def test_a_lifo_job_is_listed_at_the_time_it_was_due(conn: asyncpg.Connection) -> None:
    job = (await enqueue(conn, "k", {}, lifo=True)).id
    stored = await conn.fetchrow("SELECT run_at, created_at FROM job WHERE id = $1", job)
    assert stored is not None
    # Stored mirrored about the epoch (the claims' order), shown as the enqueue time it stands for.
    assert stored["run_at"].year < 1970
    listed = await admin.list_jobs(conn)
    assert [(row["id"], row["run_at"]) for row in listed] == [(job, stored["created_at"])]
    shown = await admin.get_job(conn, job)
    assert shown is not None
    assert shown["run_at"] == stored["created_at"]


async def test_a_lifo_job_takes_no_delay(conn: asyncpg.Connection) -> None:
    with pytest.raises(InvalidJobError, match="LIFO"):
        await enqueue(conn, "k", {}, lifo=True, delay_ms=1_000)


async def test_changing_a_waiting_jobs_payload_priority_and_delay(conn: asyncpg.Connection) -> None:
    first = (await enqueue(conn, "k", {"n": 1})).id
    second = (await enqueue(conn, "k", {"n": 2})).id
    assert await admin.change_job(conn, second, payload={"n": 20}, priority=-5) is JobState.AVAILABLE
    assert await conn.fetchval("SELECT payload FROM job WHERE id = $1", second) == {"n": 20}
    assert await claim_one(conn) == second
    assert await admin.change_job(conn, first, delay_ms=60_000) is JobState.SCHEDULED
    assert await claim_one(conn) is None
    assert await admin.change_job(conn, first, delay_ms=0) is JobState.AVAILABLE
    assert await claim_one(conn) == first


async def test_a_job_that_started_is_not_changed(conn: asyncpg.Connection) -> None:
    job = (await enqueue(conn, "k", {"n": 1})).id
    await make_running(conn, job)
    assert await admin.change_job(conn, job, payload={"n": 2}) is None
    assert await conn.fetchval("SELECT payload FROM job WHERE id = $1", job) == {"n": 1}


async def test_a_flow_parent_waiting_for_its_children_takes_no_delay(conn: asyncpg.Connection) -> None:
    parent, _ = await enqueue_flow(conn, NewJob("p"), [NewJob("c")])
    assert await admin.change_job(conn, parent, delay_ms=1_000) is None
    assert await admin.change_job(conn, parent, payload={"x": 1}) is JobState.WAITING_CHILDREN


async def test_change_refuses_bad_values(conn: asyncpg.Connection) -> None:
    job = (await enqueue(conn, "k", {})).id
    with pytest.raises(ValueError, match="priority"):
        await admin.change_job(conn, job, priority=5_000)
    with pytest.raises(ValueError, match="delay_ms"):
        await admin.change_job(conn, job, delay_ms=-1)


async def test_promote_runs_a_delayed_or_retryable_job_now(conn: asyncpg.Connection) -> None:
    delayed = (await enqueue(conn, "k", {}, delay_ms=3_600_000)).id
    assert await claim_one(conn) is None
    assert await admin.promote_job(conn, delayed)
    assert await claim_one(conn) == delayed
    retrying = (await enqueue(conn, "k", {})).id
    await conn.execute(
        "UPDATE job SET state = 'retryable', attempt = 1, run_at = now() + interval '1 hour' WHERE id = $1",
        retrying,
    )
    assert await admin.promote_job(conn, retrying)
    assert await claim_one(conn) == retrying
    assert await conn.fetchval("SELECT attempt FROM job WHERE id = $1", retrying) == 2


async def test_promote_leaves_a_job_that_is_not_delayed(conn: asyncpg.Connection) -> None:
    job = (await enqueue(conn, "k", {})).id
    assert not await admin.promote_job(conn, job)
    await make_running(conn, job)
    assert not await admin.promote_job(conn, job)
    assert await conn.fetchval("SELECT state FROM job WHERE id = $1", job) == "running"


async def test_remove_deletes_a_waiting_job_but_not_a_running_one(conn: asyncpg.Connection) -> None:
    waiting = (await enqueue(conn, "k", {})).id
    running = (await enqueue(conn, "k", {})).id
    await make_running(conn, running)
    assert await admin.remove_job(conn, waiting)
    assert not await admin.remove_job(conn, running)
    assert await conn.fetchval("SELECT array_agg(id) FROM job") == [running]


async def test_drain_removes_waiting_jobs_and_keeps_running_and_finished_ones(
    conn: asyncpg.Connection, database_url: str
) -> None:
    available = (await enqueue(conn, "k", {}, queue="q")).id
    delayed = (await enqueue(conn, "k", {}, queue="q", delay_ms=3_600_000)).id
    running = (await enqueue(conn, "k", {}, queue="q")).id
    await make_running(conn, running)
    done = (await enqueue(conn, "k", {}, queue="q")).id
    await conn.execute("UPDATE job SET state = 'completed', finalized_at = now() WHERE id = $1", done)
    other = (await enqueue(conn, "k", {}, queue="other")).id
    async with EventStream(database_url) as events:
        assert await admin.drain_queue(conn, "q", delayed=False) == 1
        drained = await events.next(timeout_s=10)
    assert (drained.event, drained.queue, drained.count) == ("drained", "q", 1)
    left = await conn.fetchval("SELECT array_agg(id ORDER BY id) FROM job")
    assert left == sorted([delayed, running, done, other])
    assert available not in left
    assert await admin.drain_queue(conn, "q") == 1
    assert await conn.fetchval("SELECT array_agg(id ORDER BY id) FROM job") == sorted([running, done, other])


async def test_a_drained_flow_child_fails_its_parent_in_another_queue(conn: asyncpg.Connection) -> None:
    parent, (child,) = await enqueue_flow(conn, Flow(NewJob("p", queue="parents"), [NewJob("c", queue="q")]))
    assert await admin.drain_queue(conn, "q") == 1
    assert await conn.fetchval("SELECT count(*) FROM job WHERE id = $1", child) == 0
    assert await conn.fetchval("SELECT state FROM job WHERE id = $1", parent) == "dead"


async def test_obliterate_deletes_a_queue_its_history_and_settings(conn: asyncpg.Connection) -> None:
    for state in ("available", "completed", "dead"):
        job = (await enqueue(conn, "k", {}, queue="q")).id
        if state != "available":
            await conn.execute(
                "UPDATE job SET state = $2::job_state, finalized_at = now() WHERE id = $1", job, state
            )
    await admin.pause_queue(conn, "q")
    other = (await enqueue(conn, "k", {}, queue="other")).id
    assert await admin.obliterate_queue(conn, "q") == 3
    assert await conn.fetchval("SELECT array_agg(id) FROM job") == [other]
    assert await conn.fetchval("SELECT count(*) FROM job_queue WHERE name = 'q'") == 0


async def test_obliterate_refuses_a_queue_with_running_jobs_unless_forced(conn: asyncpg.Connection) -> None:
    running = (await enqueue(conn, "k", {}, queue="q")).id
    await make_running(conn, running)
    with pytest.raises(admin.QueueBusyError):
        await admin.obliterate_queue(conn, "q")
    assert await conn.fetchval("SELECT count(*) FROM job") == 1
    assert await admin.obliterate_queue(conn, "q", force=True) == 1
    assert await conn.fetchval("SELECT count(*) FROM job") == 0
