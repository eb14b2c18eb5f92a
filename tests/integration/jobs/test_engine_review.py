"""The engine around the worker as a review found it broken: maintenance, flows, admin, pruning.

Each test failed before its fix (2026-11-29); the docstrings say what went wrong. Known and left
(docs/OPERATIONS.md): max depth is a soft bound under concurrent producers, and a flow parent that
its dead child fails gets no `dead` event or on-dead hook of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from paymanager.jobs import (
    MaintenanceOptions,
    NewJob,
    PeriodicJob,
    Retention,
    admin,
    enqueue,
    enqueue_flow,
)
from paymanager.jobs._queries import Q
from paymanager.jobs.maintenance import Maintenance
from paymanager.jobs.periodic import enqueue_due
from tests.integration.jobs.conftest import job_state, wait_until


async def claim(pool: asyncpg.Pool, queue: str, lease_ms: int = 60_000) -> dict[int, uuid.UUID]:
    """Claim every available job of `queue` as a worker would; their lease tokens by id."""
    rows = await pool.fetch(Q["job_claim_batch"], [queue], [100], "w", lease_ms, [], [], [], False, False)
    return {r["id"]: r["lease_token"] for r in rows}


async def complete(pool: asyncpg.Pool, job_id: int, token: uuid.UUID, result: Any = None) -> None:
    rows = await pool.fetch(Q["job_complete_many"], [job_id], [token], [result], False)
    assert [r["id"] for r in rows] == [job_id]


async def fail_dead(pool: asyncpg.Pool, job_id: int, token: uuid.UUID) -> None:
    """The worker's write of a last failed attempt (PermanentError or attempts exhausted)."""
    rows = await pool.fetch(
        Q["job_fail_many"], [job_id], [token], ["dead"], [None], [{"error": "boom", "type": "X"}], [True]
    )
    assert [r["id"] for r in rows] == [job_id]


async def flow(pool: asyncpg.Pool, on_child_dead: str = "ignore") -> tuple[int, int, int]:
    """A parent with two children, each on a queue of its own so a test can run them one by one."""
    async with pool.acquire() as conn, conn.transaction():
        parent, (a, b) = await enqueue_flow(
            conn,
            NewJob("parent", queue="p"),
            [NewJob("child", {"n": 1}, queue="qa"), NewJob("child", {"n": 2}, queue="qb")],
            on_child_dead=on_child_dead,  # type: ignore[arg-type]
        )
    return parent, a, b


# --- 1. A non-database error of a duty kills the leader's task while it keeps the leader lock ----------


async def test_a_periodic_enqueue_into_a_full_queue_does_not_stop_maintenance_cluster_wide(
    pool: asyncpg.Pool, database_url: str
) -> None:
    """`_lead`/`_run` catch DB_ERRORS only. The periodic duty's enqueue raises QueueFullError (an
    EnqueueError) when its queue is at max depth: the leader's task ends with it, yet its lock
    connection stays open, so the advisory lock is never released: no process rescues, promotes,
    prunes or schedules again until that process restarts."""
    await admin.set_max_depth(pool, "full", 1)
    await enqueue(pool, "filler", {}, queue="full")
    offset = [timedelta(0)]

    def clock() -> datetime:
        return datetime.now(UTC) + offset[0]

    options = MaintenanceOptions(
        periodic=(PeriodicJob("tick", "tick.run", queue="full", interval_ms=1_000),),
        periodic_interval_ms=20,
        rescue_interval_ms=20,
        promote_interval_ms=20,
        election_interval_ms=20,
        vacuum_interval_ms=None,
    )
    leader = Maintenance(pool, database_url, options, clock=clock)
    follower = Maintenance(pool, database_url, options, clock=clock)
    try:
        await leader.start()

        async def elected() -> bool:
            return leader.is_leader

        await wait_until(elected, 5)
        await follower.start()
        await asyncio.sleep(0.2)  # the schedule's first sight: its slot recorded
        offset[0] = timedelta(seconds=5)  # a new slot: its enqueue finds the queue full
        await asyncio.sleep(0.3)

        job = await enqueue(pool, "k", {})
        assert list(await claim(pool, "default", lease_ms=1)) == [job.id]  # a worker that died

        async def rescued() -> bool:
            return await job_state(pool, job.id) == "available"

        try:
            await wait_until(rescued, 3)
        except AssertionError:
            task = leader._task
            died = task.exception() if task is not None and task.done() else None
            raise AssertionError(
                f"expired lease never rescued: leader task done={task is not None and task.done()} "
                f"with {died!r}; leader.is_leader={leader.is_leader}, follower.is_leader={follower.is_leader}"
            ) from None
    finally:
        for m in (leader, follower):
            with contextlib.suppress(Exception):
                await m.stop(1)


async def test_a_schedule_whose_queue_is_full_does_not_hold_back_the_others(pool: asyncpg.Pool) -> None:
    await admin.set_max_depth(pool, "full", 1)
    await enqueue(pool, "filler", {}, queue="full")
    schedules = (
        PeriodicJob("stuck", "tick.run", queue="full", interval_ms=1_000),
        PeriodicJob("fine", "tick.run", queue="default", interval_ms=1_000),
    )
    now = datetime.now(UTC)
    assert await enqueue_due(pool, schedules, now) == []  # first sight: slots recorded
    later = now + timedelta(seconds=5)
    (created,) = await enqueue_due(pool, schedules, later)
    assert await pool.fetchval("SELECT queue FROM job WHERE id = $1", created) == "default"
    # The full queue's slot was not taken: once there is room, the next tick enqueues it.
    await admin.set_max_depth(pool, "full", None)
    (again,) = await enqueue_due(pool, schedules, later)
    assert await pool.fetchval("SELECT queue FROM job WHERE id = $1", again) == "full"


def test_a_schedule_with_a_bad_kind_or_queue_is_refused_when_it_is_made() -> None:
    with pytest.raises(ValueError, match="kind and queue"):
        PeriodicJob("bad", "no spaces allowed", interval_ms=1_000)
    with pytest.raises(ValueError, match="kind and queue"):
        PeriodicJob("bad", "tick.run", queue="", interval_ms=1_000)


# --- 2. A revived child of a flow is counted twice by its parent -------------------------------------


async def test_retrying_a_cancelled_child_does_not_release_the_parent_before_its_siblings(
    pool: asyncpg.Pool,
) -> None:
    """`job_child_finished` decrements the parent for every move of a child into a terminal state.
    A child cancelled (or dead, with on_child_dead='ignore') was counted once; retried, it runs and
    completes and is counted again: the parent becomes available while a sibling has not run."""
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


# --- 3. Pruning deletes the results a waiting parent is going to read ---------------------------------


async def test_pruning_keeps_the_completed_children_of_a_parent_still_waiting(pool: asyncpg.Pool) -> None:
    """Retention by count (5,000 per queue by default) or age deletes a flow's completed children while
    a sibling still runs; the parent then runs with `ctx.children_results()` missing their results."""
    parent, a, b = await flow(pool, "fail")
    (token_a,) = (await claim(pool, "qa")).values()
    await complete(pool, a, token_a, 10)
    await admin.prune(pool, Retention(completed_age_ms=None, completed_count=0))
    (token_b,) = (await claim(pool, "qb")).values()
    await complete(pool, b, token_b, 20)
    assert await job_state(pool, parent) == "available"
    results = {r["id"]: r["result"] for r in await pool.fetch(Q["job_children_results"], parent)}
    assert results == {a: 10, b: 20}


async def test_count_pruning_does_not_delete_a_dead_job_revived_meanwhile(pool: asyncpg.Pool) -> None:
    """job_prune_beyond_count picks its rows without a lock (no FOR UPDATE SKIP LOCKED, unlike
    job_prune_older): a job retried by an admin while the prune runs is deleted once the retry commits,
    because the DELETE re-checks only `job.id = doomed.id` on the new row version. The retry said the
    job is available; it is gone."""
    job = await enqueue(pool, "k", {}, queue="q")
    await pool.execute("UPDATE job SET state = 'dead', finalized_at = now() WHERE id = $1", job.id)
    async with pool.acquire() as operator:
        tx = operator.transaction()
        await tx.start()
        assert await admin.retry_job(operator, job.id)
        prune = asyncio.create_task(
            admin.prune(
                pool, Retention(completed_age_ms=None, completed_count=None, dead_age_ms=None, dead_count=0)
            )
        )
        await asyncio.sleep(0.3)  # the prune picked the job dead and waits on its row
        await tx.commit()
    await prune
    assert await pool.fetchval("SELECT state::text FROM job WHERE id = $1", job.id) == "available"


async def test_retrying_a_cancelled_flow_parent_does_not_run_it_before_its_children(
    pool: asyncpg.Pool,
) -> None:
    """A parent cancelled while it waits, then retried, becomes `available` at once with both children
    unfinished (pending_children = 2); it runs without their results, and their completions later
    find it not waiting and are lost to it."""
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


async def test_a_flow_refused_half_way_leaves_no_parent_waiting_forever(pool: asyncpg.Pool) -> None:
    """enqueue_flow on a connection outside a transaction (the pool, as `enqueue` allows) commits the
    parent and each child separately; a QueueFullError on the third child leaves the parent in
    `waiting_children` with pending_children = 3 and two children: it can never run. The docstring
    asks for a transaction but nothing enforces it."""
    await admin.set_max_depth(pool, "small", 2)
    with pytest.raises(Exception):
        await enqueue_flow(pool, NewJob("parent", queue="p"), [NewJob("child", queue="small")] * 3)
    assert await pool.fetchval("SELECT count(*) FROM job WHERE state = 'waiting_children'") == 0


# --- 4. Two admin revivals of one unique key race into a unique violation -----------------------------


async def test_concurrent_retries_of_two_dead_jobs_sharing_a_unique_key_do_not_raise(
    pool: asyncpg.Pool,
) -> None:
    """job_retry's NOT EXISTS sees no live holder in either transaction; the second UPDATE then waits
    on the unique index and fails with UniqueViolationError (a 500 in the admin API / a traceback in
    the CLI) instead of being refused (False), as it is when the holder is already committed."""
    ids = []
    for _ in range(2):
        job = await enqueue(pool, "k", {}, unique_key="settle:x")
        await pool.execute("UPDATE job SET state = 'dead', finalized_at = now() WHERE id = $1", job.id)
        ids.append(job.id)
    async with pool.acquire() as first, pool.acquire() as second:
        tx = first.transaction()
        await tx.start()
        assert await admin.retry_job(first, ids[0])
        other = asyncio.create_task(admin.retry_job(second, ids[1]))
        await asyncio.sleep(0.3)  # waits on the unique index entry of the first
        await tx.commit()
        assert await other is False


async def test_replay_racing_an_enqueue_of_the_same_key_does_not_fail_the_whole_replay(
    pool: asyncpg.Pool,
) -> None:
    """The replay's comment promises one live holder must not make the whole replay fail; a holder
    enqueued concurrently (the reconciler) does, and the other dead jobs are not replayed either."""
    dead = []
    for key in ("settle:y", None):
        job = await enqueue(pool, "k", {}, unique_key=key)
        await pool.execute("UPDATE job SET state = 'dead', finalized_at = now() WHERE id = $1", job.id)
        dead.append(job.id)
    async with pool.acquire() as producer:
        tx = producer.transaction()
        await tx.start()
        assert (await enqueue(producer, "k", {}, unique_key="settle:y")).created
        replay = asyncio.create_task(admin.replay_dead(pool, kind="k"))
        await asyncio.sleep(0.3)
        await tx.commit()
    assert await replay == [dead[1]]


# --- 5. A job whose cancel was requested is run again after its worker died ----------------------------


async def test_a_running_job_asked_to_cancel_is_cancelled_not_run_again_when_its_lease_expires(
    pool: asyncpg.Pool, database_url: str
) -> None:
    """cancel_job answers "requested" for a running job. If its worker then dies, the rescuer puts the
    job back to `available` (cancel_requested still true) and it runs again in full; it should end
    `cancelled` as the worker would have ended it."""
    job = await enqueue(pool, "k", {})
    await claim(pool, "default", lease_ms=1)
    result = await admin.cancel_job(pool, job.id)
    assert result is not None
    assert result.outcome == "requested"
    await asyncio.sleep(0.02)
    await Maintenance(pool, database_url, MaintenanceOptions(max_stalled=2)).rescue()
    assert await job_state(pool, job.id) == "cancelled"


# --- 7. Admin input a CHECK refuses surfaces as a raw database error --------------------------------


@pytest.mark.parametrize(
    ("action", "args"),
    [
        (admin.set_max_depth, ("q", 0)),
        (admin.set_max_depth, ("q", 200_000_000)),
        (admin.pause_queue, ("no such queue!",)),
        (admin.get_job, (2**63,)),
    ],
)
async def test_admin_refuses_bad_input_with_a_clear_error(pool: asyncpg.Pool, action: Any, args: Any) -> None:
    with pytest.raises(ValueError):
        await action(pool, *args)
