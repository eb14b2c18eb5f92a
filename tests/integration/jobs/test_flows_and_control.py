"""Flows, cancellation, pause/resume, graceful stop, NOTIFY wake-up and the listener's recovery."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

from paymanager.jobs import (
    JobContext,
    NewJob,
    Registry,
    Worker,
    WorkerOptions,
    admin,
    enqueue,
    enqueue_flow,
)
from paymanager.jobs._queries import Q
from tests.integration.jobs.conftest import FAST, StartWorker, idle, job_state, wait_state, wait_until
from tests.support.job_steps import claim, complete, fail_dead, flow

# No polling to speak of: a job that starts was woken by NOTIFY.
NO_POLL = WorkerOptions(owner="np", lease_ms=2_000, heartbeat_interval_ms=500, poll_interval_ms=3_600_000)


async def count_claims(worker: Worker) -> list[str]:
    """A list that gets the queues of each claim of `worker` that came back from the database."""
    done: list[str] = []
    for conn in (*worker._all_conns, worker.listener):
        fetch = conn.fetch

        async def recording(query: str, *args: Any, _fetch: Any = fetch) -> Any:
            rows = await _fetch(query, *args)
            if query in (Q["job_claim"], Q["job_claim_queue"], Q["job_claim_batch"]):
                done.append(str(args[0]))
            return rows

        conn.fetch = recording  # type: ignore[method-assign]
    return done


def flow_registry(parent_saw: list[dict[int, Any]]) -> Registry:
    registry = Registry()

    @registry.handler("child", max_attempts=1)
    async def child(ctx: JobContext) -> Any:
        if ctx.payload.get("fail"):
            raise RuntimeError("child failed")
        return ctx.payload["n"] * 10

    @registry.handler("parent")
    async def parent(ctx: JobContext) -> None:
        parent_saw.append(await ctx.children_results())

    return registry


async def test_flow_parent_runs_after_all_children_with_their_results(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    saw: list[dict[int, Any]] = []
    async with pool.acquire() as conn, conn.transaction():
        parent_id, child_ids = await enqueue_flow(
            conn, NewJob("parent"), [NewJob("child", {"n": 1}), NewJob("child", {"n": 2})]
        )
    assert await job_state(pool, parent_id) == "waiting_children"
    await start_worker(flow_registry(saw))
    await wait_state(pool, parent_id, "completed")
    assert saw == [{child_ids[0]: 10, child_ids[1]: 20}]


async def test_dead_child_fails_the_parent_by_default(pool: asyncpg.Pool, start_worker: StartWorker) -> None:
    saw: list[dict[int, Any]] = []
    parent_id, _ = await enqueue_flow(
        pool, NewJob("parent"), [NewJob("child", {"n": 1}), NewJob("child", {"fail": True})]
    )
    await start_worker(flow_registry(saw))
    await wait_state(pool, parent_id, "dead")
    assert saw == []
    assert (await pool.fetchval("SELECT last_error FROM job WHERE id = $1", parent_id))[
        "type"
    ] == "ChildFailed"


async def test_dead_child_is_ignored_when_the_flow_says_so(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    saw: list[dict[int, Any]] = []
    parent_id, (ok, failed) = await enqueue_flow(
        pool,
        NewJob("parent"),
        [NewJob("child", {"n": 1}), NewJob("child", {"fail": True})],
        on_child_dead="ignore",
    )
    await start_worker(flow_registry(saw))
    await wait_state(pool, parent_id, "completed")
    assert saw == [{ok: 10, failed: None}]


async def test_the_flow_trigger_asks_the_updates_of_other_jobs_for_their_parent_alone(
    conn: asyncpg.Connection,
) -> None:
    # PostgreSQL compiles a row trigger's WHEN clause again for every UPDATE statement of the table:
    # state tests there were paid by every claim and completion, of flow children or not.
    rows = await conn.fetch(
        "SELECT tgname, pg_get_triggerdef(oid) AS definition FROM pg_trigger"
        " WHERE tgrelid = 'job'::regclass AND NOT tgisinternal"
    )
    assert [r["tgname"] for r in rows] == ["job_child_moved"]
    assert "WHEN ((new.parent_id IS NOT NULL))" in rows[0]["definition"], rows[0]["definition"]


async def test_a_flow_refused_half_way_leaves_no_parent_waiting_forever(pool: asyncpg.Pool) -> None:
    """enqueue_flow outside a transaction (on the pool, as `enqueue` allows) must not commit the parent
    and each child separately: a QueueFullError on the third child would leave the parent in
    `waiting_children` with pending_children = 3 and two children, never to run."""
    await admin.set_max_depth(pool, "small", 2)
    with pytest.raises(Exception):
        await enqueue_flow(pool, NewJob("parent", queue="p"), [NewJob("child", queue="small")] * 3)
    assert await pool.fetchval("SELECT count(*) FROM job WHERE state = 'waiting_children'") == 0


# --- a flow revived by hand (retry, replay): each child counted once, the parent waits for them ----


async def test_retrying_a_cancelled_child_does_not_release_the_parent_before_its_siblings(
    pool: asyncpg.Pool,
) -> None:
    """`job_child_moved` decrements the parent for a child's move into a terminal state. A child
    cancelled (or dead, with on_child_dead='ignore') was counted once; retried, it runs and completes
    and must not be counted again, which would make the parent available while a sibling has not run."""
    parent, a, b = await flow(pool, "ignore")
    assert await admin.cancel_job(pool, a) is not None
    assert await pool.fetchval("SELECT pending_children FROM job WHERE id = $1", parent) == 1
    assert await admin.retry_job(pool, a)
    (token,) = (await claim(pool, "qa")).values()
    await complete(pool, a, token, 10)
    assert await job_state(pool, b) == "available"  # the sibling has not even started
    assert await job_state(pool, parent) == "waiting_children"


async def test_replaying_a_dead_child_does_not_release_the_parent_before_its_siblings(
    pool: asyncpg.Pool,
) -> None:
    parent, a, b = await flow(pool, "ignore")
    (token,) = (await claim(pool, "qa")).values()
    await fail_dead(pool, a, token)
    assert await admin.replay_dead(pool, kind="child") == [a]
    (token,) = (await claim(pool, "qa")).values()
    await complete(pool, a, token, 10)
    assert await job_state(pool, b) == "available"
    assert await job_state(pool, parent) == "waiting_children"


async def test_retrying_a_cancelled_flow_parent_does_not_run_it_before_its_children(
    pool: asyncpg.Pool,
) -> None:
    """A parent cancelled while it waits, then retried, must not become `available` at once with both
    children unfinished: it would run without their results, and their completions would later find
    it not waiting and be lost to it."""
    parent, a, b = await flow(pool, "fail")
    assert await admin.cancel_job(pool, parent) is not None
    await admin.retry_job(pool, parent)
    assert await job_state(pool, a) == "available"
    assert await job_state(pool, b) == "available"
    assert await job_state(pool, parent) in ("waiting_children", "cancelled")


async def test_replaying_a_dead_flow_parent_waits_again_for_its_unfinished_children(
    pool: asyncpg.Pool,
) -> None:
    """The replay's counterpart of the retry above: a parent dead because child A died (policy
    "fail") while child B still waits is replayed; it waits for B instead of running at once."""
    parent, a, b = await flow(pool, "fail")
    tokens = await claim(pool, "qa")
    await fail_dead(pool, a, tokens[a])
    assert await job_state(pool, parent) == "dead"
    assert parent in await admin.replay_dead(pool, kind="parent")
    row = await pool.fetchrow("SELECT state, pending_children FROM job WHERE id = $1", parent)
    assert dict(row) == {"state": "waiting_children", "pending_children": 1}
    tokens = await claim(pool, "qb")
    await complete(pool, b, tokens[b], 2)
    assert await job_state(pool, parent) == "available"


async def test_replaying_a_dead_flow_with_its_dead_child_waits_for_the_child(pool: asyncpg.Pool) -> None:
    """`replay_dead` with no filter (the usual "replay everything after the outage") revives the parent
    and its dead child in ONE statement. The parent must wait for the child: counting the child as
    still dead would make the parent `available` with pending_children 0, and job_child_moved would
    then find it not waiting: the parent would run before (and without the result of) its child."""
    async with pool.acquire() as conn, conn.transaction():
        parent, (child,) = await enqueue_flow(
            conn, NewJob("parent", queue="p"), [NewJob("child", queue="qa")], on_child_dead="fail"
        )
    tokens = await claim(pool, "qa")
    await fail_dead(pool, child, tokens[child])
    assert await job_state(pool, parent) == "dead"
    assert sorted(await admin.replay_dead(pool)) == sorted([parent, child])
    assert await job_state(pool, child) == "available"
    assert await job_state(pool, parent) == "waiting_children"


# --- cancel, pause, stop, wake-up ------------------------------------------------------------------


async def test_cancel_before_start_and_while_running(pool: asyncpg.Pool, start_worker: StartWorker) -> None:
    started = asyncio.Event()
    registry = Registry()

    @registry.handler("stoppable")
    async def stoppable(ctx: JobContext) -> None:
        started.set()
        await asyncio.wait_for(ctx.cancelled.wait(), 30)
        ctx.raise_if_cancelled()

    waiting = await enqueue(pool, "stoppable", {}, delay_ms=3_600_000)
    result = await admin.cancel_job(pool, waiting.id)
    assert result is not None
    assert result.outcome == "cancelled"
    assert await job_state(pool, waiting.id) == "cancelled"

    await start_worker(registry)
    running = await enqueue(pool, "stoppable", {})
    await asyncio.wait_for(started.wait(), 15)
    result = await admin.cancel_job(pool, running.id)
    assert result is not None
    assert result.outcome == "requested"
    await wait_state(pool, running.id, "cancelled")
    assert await admin.cancel_job(pool, running.id) is None


async def test_paused_queue_is_not_claimed_until_resumed(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    registry = Registry()
    registry.register("k", lambda ctx: None)
    await admin.pause_queue(pool, "default")
    worker = await start_worker(registry)
    claims_after_enqueue = await count_claims(worker)
    job = await enqueue(pool, "k", {})
    claims_after_enqueue.clear()

    async def claimed_twice_since() -> bool:
        return len(claims_after_enqueue) >= 2  # the NOTIFY's claim, and a poll's

    await wait_until(claimed_twice_since)
    assert await job_state(pool, job.id) == "available"
    await admin.resume_queue(pool, "default")
    await wait_state(pool, job.id, "completed")


async def test_stop_releases_unfinished_jobs_at_once_without_spending_an_attempt(
    pool: asyncpg.Pool, database_url: str
) -> None:
    from paymanager.jobs import Worker

    started = asyncio.Event()
    registry = Registry()

    @registry.handler("forever")
    async def forever(ctx: JobContext) -> None:
        started.set()
        await asyncio.sleep(3600)

    registry.register("quick", lambda ctx: None)
    worker = Worker(pool, database_url, registry, {"default": 5}, FAST)
    await worker.start()
    stuck = await enqueue(pool, "forever", {})
    await asyncio.wait_for(started.wait(), 15)
    await worker.stop(timeout_s=0.2)
    row = await pool.fetchrow("SELECT state, attempt, lease_token FROM job WHERE id = $1", stuck.id)
    assert row is not None
    assert dict(row) == {"state": "available", "attempt": 0, "lease_token": None}


async def test_notify_wakes_an_idle_worker_without_polling(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    registry = Registry()
    registry.register("k", lambda ctx: None)
    worker = await start_worker(registry, options=NO_POLL)
    await idle(worker)  # its start-up claim came back: only a NOTIFY can start the next one
    job = await enqueue(pool, "k", {})
    await wait_state(pool, job.id, "completed")


async def test_dead_listener_connection_is_reestablished(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    registry = Registry()
    registry.register("k", lambda ctx: None)
    options = WorkerOptions(
        owner="np", lease_ms=2_000, heartbeat_interval_ms=500, poll_interval_ms=3_600_000,
        listener_check_interval_ms=200,
    )  # fmt: skip
    worker = await start_worker(registry, options=options)
    old_pid = worker.listener.backend_pid
    assert await pool.fetchval("SELECT pg_terminate_backend($1)", old_pid)

    async def reconnected() -> bool:
        return worker.listener.reconnects >= 1

    await wait_until(reconnected)
    assert worker.listener.backend_pid != old_pid
    job = await enqueue(pool, "k", {})
    await wait_state(pool, job.id, "completed")
