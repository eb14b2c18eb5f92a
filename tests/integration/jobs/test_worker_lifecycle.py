"""The worker's hold on each attempt it runs: slots, heartbeats, timeouts, stop and quick commits,
including an attempt run in its claim's own task and a job claimed again while this worker still
holds an earlier attempt whose lease it lost; and the collector setting a worker makes at start."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from structlog.testing import capture_logs

from paymanager.jobs import JobContext, Registry, admin, enqueue
from paymanager.jobs import worker as worker_module
from paymanager.jobs._queries import Q
from paymanager.jobs.maintenance import Maintenance
from tests.integration.jobs.conftest import (
    FAST,
    QUIET,
    StartWorker,
    counting_registry,
    idle,
    job_state,
    start_a_slow_job,
    wait_state,
    wait_until,
)
from tests.support.waiting import now_true, wait_for_lock_waiters, wait_for_statement


def holds(worker: Any, job_id: int) -> list[Any]:
    """The worker's holds on attempts of `job_id` (held by attempt: one job may have two)."""
    return [held for held in worker._held.values() if held.ctx.id == job_id]


async def idle_worker_with_a_slow_kind(start_worker: StartWorker) -> Any:
    """An idle worker (4 slots, claims from NOTIFYs only) whose kind "slow" runs for 30 s."""
    registry = Registry()

    @registry.handler("slow")
    async def slow(ctx: JobContext) -> None:
        await asyncio.sleep(30)

    worker = await start_worker(registry, {"default": 4}, QUIET)
    await idle(worker)
    return worker


async def rescue_as_if_later(pool: asyncpg.Pool, database_url: str) -> None:
    """The rescuer, as if an hour passed with no heartbeat (a frozen worker, a database blip)."""
    later = datetime.now(UTC) + timedelta(hours=1)
    await Maintenance(pool, database_url, clock=lambda: later).rescue()


# --- a job claimed again by the worker that still holds its previous attempt ------------------------


async def test_a_job_reclaimed_while_its_refused_completion_is_settled_stays_held(
    pool: asyncpg.Pool, database_url: str, start_worker: StartWorker
) -> None:
    # Attempt 1 loses its lease while it runs (the rescuer makes the job available again) and then
    # returns. Its completion rides on the next claim, which is refused (the token moved on) and in
    # the same statement claims the job again (attempt 2). Settling attempt 1's refused completion
    # must not touch attempt 2's hold or free its slot (holds were once keyed by job id).
    attempt_two = asyncio.Event()
    release = asyncio.Event()
    runs: list[JobContext] = []
    registry = Registry()

    @registry.handler("k")
    async def handle(ctx: JobContext) -> None:
        runs.append(ctx)
        if len(runs) == 1:
            await rescue_as_if_later(pool, database_url)
            return
        attempt_two.set()
        await release.wait()

    worker = await start_worker(registry, {"default": 1}, FAST)
    job = await enqueue(pool, "k", {})
    await asyncio.wait_for(attempt_two.wait(), 15)
    # Until the claim settled the refused completion of attempt 1 that it carried.
    await wait_until(lambda: now_true(not worker._completer.is_pending(runs[0]) and not _pending(worker)))
    assert await job_state(pool, job.id) == "running"
    problems = []
    if [held.ctx for held in holds(worker, job.id)] != [runs[1]]:
        problems.append("the second run is not held")
    if worker._free["default"] != 0:
        problems.append(f"free slots {worker._free} while the only slot runs")
    # A stop past its timeout must give the running attempt back.
    await worker.stop(timeout_s=0.2)
    release.set()
    if (state := await job_state(pool, job.id)) != "available":
        problems.append(f"stop left the job {state}")
    assert not problems, problems


async def test_a_job_reclaimed_while_its_first_attempt_still_runs_keeps_the_second_held(
    pool: asyncpg.Pool, database_url: str, start_worker: StartWorker
) -> None:
    # The same worker runs the job twice at once (attempt 1 lost its lease, the job was claimed
    # again): each attempt keeps its own hold. The heartbeat tells attempt 1 its lease is gone;
    # attempt 1's end and its refused completion leave attempt 2 held (heartbeat, watchdog, given
    # back at stop).
    first_running = asyncio.Event()
    second_running = asyncio.Event()
    release_first = asyncio.Event()
    release_second = asyncio.Event()
    contexts: list[JobContext] = []
    registry = Registry()

    @registry.handler("k")
    async def handle(ctx: JobContext) -> None:
        contexts.append(ctx)
        if len(contexts) == 1:
            first_running.set()
            await release_first.wait()
        else:
            second_running.set()
            await release_second.wait()

    options = dataclasses.replace(FAST, heartbeat_interval_ms=60_000, lease_ms=120_000)
    worker = await start_worker(registry, {"default": 2}, options)
    job = await enqueue(pool, "k", {})
    await asyncio.wait_for(first_running.wait(), 15)
    await rescue_as_if_later(pool, database_url)
    await asyncio.wait_for(second_running.wait(), 15)
    first, second = contexts
    await worker.heartbeat()
    release_first.set()  # attempt 1 ends; its completion is refused
    await wait_until(lambda: now_true(not worker._completer.is_pending(first) and not _pending(worker)))
    problems = []
    if not first.lease_lost.is_set():
        problems.append("attempt 1 was never told that its lease is gone")
    try:
        # Attempt 1's hold goes once its task ended; attempt 2's must stay.
        await wait_until(lambda: now_true([held.ctx for held in holds(worker, job.id)] == [second]), 5)
    except AssertionError:
        problems.append(f"attempt 2 runs but the holds are {holds(worker, job.id)}")
    await worker.stop(timeout_s=0.2)
    release_second.set()
    if (state := await job_state(pool, job.id)) != "available":
        problems.append(f"stop left attempt 2 {state}")
    assert not problems, problems


def _pending(worker: Any) -> bool:
    return bool(worker._completer._completions or worker._completer._failures)


async def test_a_cancelled_error_that_is_not_a_cancel_of_the_job_fails_the_attempt(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    # A handler that awaits something cancelled elsewhere (a shared future, a child task another
    # part of the program cancelled) gets a CancelledError although nobody cancelled its job: the
    # attempt fails like any other error. Re-raised, it would end the task with the job still held,
    # its slot taken and its lease extended by every heartbeat for as long as the worker lives.
    registry = Registry()

    @registry.handler("k", max_attempts=3)
    async def awaits_a_future_cancelled_elsewhere(ctx: JobContext) -> None:
        shared = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(shared.cancel)
        await shared

    worker = await start_worker(registry, {"default": 2}, QUIET)
    await idle(worker)
    job = await enqueue(pool, "k", {})
    problems = []
    try:
        await wait_until(lambda: _state_is_not(pool, job.id, "running", "available"), timeout_s=3)
    except AssertionError:
        problems.append(f"job still {await job_state(pool, job.id)} after 3 s")
    if holds(worker, job.id):
        problems.append(f"still held; free slots {worker._free}")
    await worker.stop(timeout_s=0.2)
    if await job_state(pool, job.id) == "running":
        problems.append("stop left it running")
    assert not problems, problems


async def _state_is_not(pool: asyncpg.Pool, job_id: int, *states: str) -> bool:
    return await job_state(pool, job_id) not in states


# --- stop ----------------------------------------------------------------------------------------


async def test_stop_keeps_to_its_timeout_while_a_claim_waits_on_a_lock(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    # A claim in flight when stop begins is awaited by the fetch loop: a claim waiting on a lock (a
    # migration's ALTER TABLE on job_queue) gives up after the claim sessions' lock_timeout, so stop
    # ends within about that and its own timeout, not when the lock goes.
    release = asyncio.Event()
    registry = Registry()

    @registry.handler("slow")
    async def slow(ctx: JobContext) -> None:
        await release.wait()

    worker = await start_worker(registry, {"default": 2}, QUIET)
    await idle(worker)
    running = await enqueue(pool, "slow", {})
    await wait_state(pool, running.id, "running")
    async with pool.acquire() as locker:
        transaction = locker.transaction()
        await transaction.start()
        await locker.execute("LOCK TABLE job_queue IN ACCESS EXCLUSIVE MODE")
        await pool.execute(
            "INSERT INTO job (queue, kind, payload, state) VALUES ('default', 'slow', '{}', 'available')"
            " RETURNING id, pg_notify('pm_job_available', 'default')"
        )
        await wait_until(lambda: now_true(bool(worker._claims)))
        await wait_for_lock_waiters(pool)  # the claim waits on the lock
        started = time.monotonic()
        stop = asyncio.create_task(worker.stop(timeout_s=0.3))
        done, _ = await asyncio.wait([stop], timeout=3)
        took = time.monotonic() - started
        await transaction.rollback()
    release.set()
    await stop
    assert done, f"stop(timeout_s=0.3) still waiting after {took:.1f}s (a claim waits on a lock)"


async def test_stop_gives_back_a_job_run_in_its_claims_task(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    # Pins: the claim's own task running its first job is waited for, cancelled past the timeout
    # and its job released.
    worker = await idle_worker_with_a_slow_kind(start_worker)
    job = await enqueue(pool, "slow", {})
    await wait_state(pool, job.id, "running")
    (held,) = holds(worker, job.id)
    assert held.task is not None
    assert held.task not in worker._claims
    started = time.monotonic()
    await worker.stop(timeout_s=0.2)
    assert time.monotonic() - started < 1.5
    assert held.task.done()
    assert await job_state(pool, job.id) == "available"


async def test_stop_during_a_claim_starts_every_job_in_its_own_task_and_gives_them_back(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    # Pins: a claim that comes back after stop began runs no job inline; stop waits for it, then
    # gives back every job it got.
    worker = await idle_worker_with_a_slow_kind(start_worker)
    conn = worker.listener
    fetch = conn.fetch
    entered = asyncio.Event()
    stop_began = asyncio.Event()

    async def held_back_fetch(query: str, *args: Any) -> Any:
        if query in (Q["job_claim_queue"], Q["job_claim"], Q["job_claim_batch"]):
            rows = await fetch(query, *args)
            entered.set()
            await stop_began.wait()  # the claim comes back only once stop began
            return rows
        return await fetch(query, *args)

    conn.fetch = held_back_fetch  # type: ignore[method-assign]
    job = await enqueue(pool, "slow", {})
    await asyncio.wait_for(entered.wait(), 15)
    stop = asyncio.create_task(worker.stop(timeout_s=0.1))
    await wait_until(lambda: now_true(worker._stopping))
    stop_began.set()
    await stop
    assert await job_state(pool, job.id) == "available"
    assert not worker._held


async def test_stop_gives_back_a_job_whose_row_a_heartbeat_holds_for_a_moment(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    """`stop` releases with FOR UPDATE SKIP LOCKED (so a settlement transaction still open on a row
    cannot hold the shutdown). A short holder of the row at that moment (a heartbeat UPDATE in flight,
    an admin query) must not make the release skip the job for good: it would stay `running` under
    its lease until that expired, and the rescue would count a stall. The heartbeat stops before the
    release, and the release tries again for a while."""
    worker, job = await start_a_slow_job(pool, start_worker)
    async with pool.acquire() as probe, pool.acquire() as holder:
        tx = holder.transaction()
        await tx.start()
        # Exactly what job_heartbeat_many writes, its transaction still open.
        await holder.execute("UPDATE job SET lease_expires_at = lease_expires_at WHERE id = $1", job.id)
        stop = asyncio.create_task(worker.stop(timeout_s=0.2))
        await wait_for_statement(probe, Q["job_release_many"])  # the release met the held row
        await tx.commit()
    await stop
    assert await job_state(pool, job.id) == "available"


async def _held_job_whose_lease_moved_on(pool: asyncpg.Pool, start_worker: StartWorker, how: str) -> Any:
    worker, job = await start_a_slow_job(pool, start_worker)
    if how == "reclaimed":  # rescued and claimed by another worker: running under another token
        await pool.execute(
            "UPDATE job SET lease_token = gen_random_uuid(), lease_owner = 'other' WHERE id = $1", job.id
        )
    else:  # rescued, not claimed yet
        await pool.execute(
            "UPDATE job SET state = 'available', lease_token = NULL, lease_owner = NULL,"
            " lease_expires_at = NULL WHERE id = $1",
            job.id,
        )
    return worker, job


def _left_to_expire(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [log for log in logs if log["event"] == "job leases left to expire"]


async def test_stop_does_not_retry_the_release_of_a_job_whose_lease_moved_on(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    """The release tries again only for rows it found locked. A held attempt whose lease is gone
    (rescued and claimed again elsewhere, a state a worker can be in) can never be released: trying
    again would keep every such stop past its timeout_s and end it with a false "left to expire"
    warning."""
    worker, job = await _held_job_whose_lease_moved_on(pool, start_worker, "reclaimed")
    with capture_logs() as logs:
        await worker.stop(timeout_s=0)
    assert await job_state(pool, job.id) == "running"  # the other worker's lease is untouched
    assert _left_to_expire(logs) == []


async def test_stop_does_not_retry_the_release_of_a_job_already_rescued(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    worker, job = await _held_job_whose_lease_moved_on(pool, start_worker, "rescued")
    with capture_logs() as logs:
        await worker.stop(timeout_s=0)
    assert await job_state(pool, job.id) == "available"
    assert _left_to_expire(logs) == []


# --- the watchdog and cancellation for a job run in its claim's task --------------------------------


async def test_the_watchdog_times_out_a_sync_handler_run_in_its_claims_task(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    registry = Registry()

    @registry.handler("hangs", max_attempts=1, timeout_ms=100)
    def hangs(ctx: JobContext) -> None:
        time.sleep(0.5)  # the hang under test: a sync handler past its timeout, which no cancel reaches

    worker = await start_worker(registry, {"default": 2}, QUIET)
    await idle(worker)
    job = await enqueue(pool, "hangs", {})
    await wait_state(pool, job.id, "dead")
    error = await pool.fetchval("SELECT last_error FROM job WHERE id = $1", job.id)
    assert error["type"] == "TimeoutError"
    await wait_until(lambda: now_true(worker._free["default"] == 2))


async def test_a_cancel_reaches_a_job_run_in_its_claims_task(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    registry = Registry()

    @registry.handler("waits", max_attempts=5)
    async def waits(ctx: JobContext) -> None:
        await ctx.cancelled.wait()
        ctx.raise_if_cancelled()

    worker = await start_worker(registry, {"default": 2}, QUIET)
    await idle(worker)
    job = await enqueue(pool, "waits", {})
    await wait_state(pool, job.id, "running")
    assert [held.task in worker._claims for held in holds(worker, job.id)] == [False]
    await admin.cancel_job(pool, job.id)
    await wait_state(pool, job.id, "cancelled")
    await wait_until(lambda: now_true(worker._free["default"] == 2 and not worker._held))


# --- a claim that met a lock ------------------------------------------------------------------------


async def test_a_claim_that_timed_out_on_a_lock_goes_again_at_once(
    pool: asyncpg.Pool, start_worker: StartWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The pause after a failed claim is for a failing database; a claim that timed out on a lock
    # (a migration's, or another claim's in a deadlock) has waited its lock_timeout already. With the
    # pause made an hour, a second attempt within the test shows there was none.
    monkeypatch.setattr(worker_module, "CLAIM_RETRY_DELAY_S", 3_600)
    heard: list[BaseException] = []
    options = dataclasses.replace(QUIET, claim_lock_timeout_ms=50)
    await start_worker(counting_registry([]), options=options, on_error=lambda where, exc: heard.append(exc))
    async with pool.acquire() as locker, locker.transaction():
        await locker.execute("LOCK TABLE job IN ACCESS EXCLUSIVE MODE")
        await pool.execute("SELECT pg_notify('pm_job_available', 'default')")
        await wait_until(lambda: now_true(len(heard) >= 2))
    assert all(isinstance(exc, asyncpg.LockNotAvailableError) for exc in heard), heard


# --- synchronous_commit is the claim's transaction's only ------------------------------------------


async def test_a_quick_claim_leaves_synchronous_commit_on_for_the_connections_next_statement(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    ran: list[int] = []
    worker = await start_worker(counting_registry(ran), {"default": 2}, QUIET)
    await idle(worker)
    pinned = worker._idle_conns[0]
    # A queue the worker does not serve: these claims are ours, on the worker's own connections.
    for conn in (pinned, worker.listener):
        job = await enqueue(pool, "k", {}, queue="manual")
        rows = await conn.fetch(Q["job_claim_queue"], "manual", 1, "manual", 30_000, True)
        assert [r["id"] for r in rows] == [job.id]
        assert [tuple(r) for r in await conn.fetch("SHOW synchronous_commit")] == [("on",)]
    # The worker's own quick claims (on the listener, idle): its session is still 'on' after them.
    for _ in range(3):
        job = await enqueue(pool, "k", {})
        await wait_state(pool, job.id, "completed")
    assert [tuple(r) for r in await worker.listener.fetch("SHOW synchronous_commit")] == [("on",)]


# --- the fetch loop's asyncio.timeout --------------------------------------------------------------


async def test_a_wake_at_the_poll_deadline_neither_stalls_nor_crashes_the_fetch_loop(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    # The wake set in the very loop turn where the poll's timeout fires (and a zero timeout when the
    # poll is due): the loop goes on and claims.
    ran: list[int] = []
    options = dataclasses.replace(FAST, poll_interval_ms=10)
    worker = await start_worker(counting_registry(ran), {"default": 2}, options)
    loop = asyncio.get_running_loop()
    for _ in range(50):
        # The race under test: a wake timed to land on the poll's deadline, again and again.
        loop.call_later(0.01, worker._wake.set)
        await asyncio.sleep(0.01)
    fetch = worker._tasks[0]
    assert not fetch.done()
    job = await enqueue(pool, "k", {})
    await wait_state(pool, job.id, "completed")
    assert ran == [job.id]
    assert not fetch.done()


@pytest.fixture
def gc_threshold() -> Iterator[tuple[int, ...]]:
    """The process's collector thresholds, set to CPython's defaults for the test and put back."""
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield gc.get_threshold()
    gc.set_threshold(*saved)


async def test_a_started_worker_collects_young_objects_less_often_and_never_more(
    gc_threshold: tuple[int, ...], start_worker: StartWorker
) -> None:
    await start_worker(Registry(), {"default": 1}, dataclasses.replace(FAST, gc_young_threshold=None))
    assert gc.get_threshold() == gc_threshold, "None leaves the process's setting alone"
    await start_worker(Registry(), {"default": 1}, dataclasses.replace(FAST, gc_young_threshold=5_000))
    assert gc.get_threshold() == (5_000, 10, 10)
    await start_worker(Registry(), {"default": 1}, dataclasses.replace(FAST, gc_young_threshold=1_000))
    assert gc.get_threshold() == (5_000, 10, 10), "a lower threshold is not applied"
    with pytest.raises(ValueError, match="gc_young_threshold"):
        dataclasses.replace(FAST, gc_young_threshold=10)
