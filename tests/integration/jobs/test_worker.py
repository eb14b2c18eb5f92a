from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import asyncpg
import pytest

from paymanager.jobs import (
    EventStream,
    Fixed,
    Flow,
    JobContext,
    NewJob,
    PermanentError,
    Registry,
    Worker,
    WorkerOptions,
    enqueue,
    enqueue_flow,
    enqueue_many,
)
from paymanager.jobs import worker as worker_module
from paymanager.jobs._store import claim
from tests.integration.jobs.conftest import FAST, StartWorker, job_state, wait_state, wait_until
from tests.support.waiting import now_true


async def test_worker_runs_a_job_and_stores_its_result(pool: asyncpg.Pool, start_worker: StartWorker) -> None:
    registry = Registry()

    @registry.handler("add")
    async def add(ctx: JobContext) -> Any:
        return {"sum": ctx.payload["a"] + ctx.payload["b"]}

    await start_worker(registry)
    job = await enqueue(pool, "add", {"a": 2, "b": 3})
    await wait_state(pool, job.id, "completed")
    row = await pool.fetchrow(
        "SELECT result, attempt, lease_token, finalized_at FROM job WHERE id = $1", job.id
    )
    assert row is not None
    assert row["result"] == {"sum": 5}
    assert row["attempt"] == 1
    assert row["lease_token"] is None
    assert row["finalized_at"] is not None


async def test_the_completions_of_a_batch_store_each_jobs_own_result_or_none(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    # Batches where no job returns a result are sent without a results array (NULL for each);
    # batches mixing both send one; each job's own must be stored either way, by the claims that
    # carry completions and by the completer's own writes.
    registry = Registry()

    @registry.handler("maybe")
    async def maybe(ctx: JobContext) -> Any:
        return {"i": ctx.payload["i"]} if ctx.payload["i"] % 3 == 0 else None

    @registry.handler("never")
    async def never(ctx: JobContext) -> None:
        return None

    await start_worker(registry, {"default": 8})
    mixed = await enqueue_many(pool, [NewJob("maybe", {"i": i}) for i in range(300)])
    bare = await enqueue_many(pool, [NewJob("never", {}) for _ in range(100)])
    await wait_until(lambda: _all_completed(pool, [*mixed, *bare]))
    rows = await pool.fetch("SELECT id, result, payload FROM job WHERE id = ANY($1::bigint[])", mixed + bare)
    results = {row["id"]: row["result"] for row in rows}
    assert [results[i] for i in mixed] == [{"i": n} if n % 3 == 0 else None for n in range(300)]
    assert [results[i] for i in bare] == [None] * 100


async def _all_completed(pool: asyncpg.Pool, ids: list[int]) -> bool:
    n = await pool.fetchval(
        "SELECT count(*) FROM job WHERE id = ANY($1::bigint[]) AND state = 'completed'", ids
    )
    return bool(n == len(ids))


async def test_many_jobs_over_two_queues_all_complete_once(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    seen: list[int] = []
    registry = Registry()

    @registry.handler("count")
    async def count(ctx: JobContext) -> None:
        seen.append(ctx.payload["i"])

    await start_worker(registry, {"a": 7, "b": 3})
    jobs = [NewJob("count", {"i": i}, queue="a" if i % 2 else "b") for i in range(500)]
    await enqueue_many(pool, jobs)

    async def done() -> bool:
        return await pool.fetchval("SELECT count(*) FROM job WHERE state = 'completed'") == 500

    await wait_until(done)
    assert sorted(seen) == list(range(500))


async def test_per_queue_concurrency_is_never_exceeded(pool: asyncpg.Pool, start_worker: StartWorker) -> None:
    running = 0
    peak = 0
    registry = Registry()

    @registry.handler("slow")
    async def slow(ctx: JobContext) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.02)
        running -= 1

    await start_worker(registry, {"default": 3})
    await enqueue_many(pool, [NewJob("slow") for _ in range(30)])

    async def done() -> bool:
        return await pool.fetchval("SELECT count(*) FROM job WHERE state = 'completed'") == 30

    await wait_until(done)
    assert peak == 3


async def test_failed_job_is_retried_with_its_backoff_and_keeps_error_history(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    registry = Registry()

    @registry.handler("flaky", max_attempts=3, backoff=Fixed(0))
    async def flaky(ctx: JobContext) -> str:
        if ctx.attempt < 3:
            raise RuntimeError(f"boom {ctx.attempt}")
        return "ok"

    await start_worker(registry)
    job = await registry.enqueue(pool, "flaky", {})
    await wait_state(pool, job.id, "completed")
    row = await pool.fetchrow("SELECT attempt, errors, last_error, result FROM job WHERE id = $1", job.id)
    assert row is not None
    assert row["attempt"] == 3
    assert row["result"] == "ok"
    assert [e["error"] for e in row["errors"]] == ["boom 1", "boom 2"]
    assert row["last_error"]["error"] == "boom 2"


async def test_exhausted_attempts_make_the_job_dead_and_call_the_hook(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    dead: list[int] = []
    registry = Registry()

    @registry.handler("always_fails", max_attempts=2, backoff=Fixed(0))
    async def always_fails(ctx: JobContext) -> None:
        raise ValueError("nope")

    async def on_dead(job: Any) -> None:
        dead.append(job.id)

    await start_worker(registry, on_dead=on_dead)
    job = await registry.enqueue(pool, "always_fails", {})
    await wait_state(pool, job.id, "dead")
    assert await pool.fetchval("SELECT attempt FROM job WHERE id = $1", job.id) == 2

    async def hooked() -> bool:
        return dead == [job.id]

    await wait_until(hooked)


async def test_permanent_error_goes_straight_to_dead(pool: asyncpg.Pool, start_worker: StartWorker) -> None:
    registry = Registry()

    @registry.handler("bad_input", max_attempts=10)
    async def bad_input(ctx: JobContext) -> None:
        raise PermanentError("invalid account")

    await start_worker(registry)
    job = await registry.enqueue(pool, "bad_input", {})
    await wait_state(pool, job.id, "dead")
    row = await pool.fetchrow("SELECT attempt, last_error FROM job WHERE id = $1", job.id)
    assert row is not None
    assert row["attempt"] == 1
    assert row["last_error"]["type"] == "PermanentError"


async def test_unregistered_kind_is_dead_not_a_crash(pool: asyncpg.Pool, start_worker: StartWorker) -> None:
    registry = Registry()
    registry.register("known", lambda ctx: None)
    await start_worker(registry)
    unknown = await enqueue(pool, "unknown", {})
    known = await enqueue(pool, "known", {})
    await wait_state(pool, unknown.id, "dead")
    await wait_state(pool, known.id, "completed")


async def test_sync_handler_runs_in_a_thread(pool: asyncpg.Pool, start_worker: StartWorker) -> None:
    threads: list[str] = []
    registry = Registry()

    def blocking(ctx: JobContext) -> int:
        threads.append(threading.current_thread().name)
        return 7

    registry.register("blocking", blocking)
    await start_worker(registry)
    job = await enqueue(pool, "blocking", {})
    await wait_state(pool, job.id, "completed")
    assert threads
    assert threads[0].startswith("job-sync")
    assert await pool.fetchval("SELECT result FROM job WHERE id = $1", job.id) == 7


async def test_timeout_fails_the_attempt(pool: asyncpg.Pool, start_worker: StartWorker) -> None:
    registry = Registry()

    @registry.handler("hangs", max_attempts=1, timeout_ms=50)
    async def hangs(ctx: JobContext) -> None:
        await asyncio.sleep(60)

    await start_worker(registry)
    job = await registry.enqueue(pool, "hangs", {})
    await wait_state(pool, job.id, "dead")
    assert (await pool.fetchval("SELECT last_error FROM job WHERE id = $1", job.id))["type"] == "TimeoutError"


async def test_a_timed_out_job_leaves_the_next_job_on_its_task_uncancelled(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    # Jobs share long-lived runner tasks: the cancel that ended one job's attempt must not reach the
    # jobs that run next on the same task.
    registry = Registry()
    hung_on: list[asyncio.Task[Any] | None] = []
    napped_on: list[asyncio.Task[Any] | None] = []

    @registry.handler("filler", max_attempts=1)
    async def filler(ctx: JobContext) -> None:
        await asyncio.sleep(0.3)  # holds the claim's own task: the next job goes to a runner

    @registry.handler("hangs", max_attempts=1, timeout_ms=50)
    async def hangs(ctx: JobContext) -> None:
        hung_on.append(asyncio.current_task())
        await asyncio.sleep(60)

    @registry.handler("naps", max_attempts=1)
    async def naps(ctx: JobContext) -> str:
        napped_on.append(asyncio.current_task())
        await asyncio.sleep(0.1)
        if ctx.payload.get("trip"):
            # A CancelledError of the handler's own (not a cancel of its job): a failure, as long
            # as the task does not still count the timeout's cancel.
            cancelled: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            cancelled.cancel()
            await cancelled
        return "rested"

    first = await enqueue_many(pool, [NewJob("filler", {}), NewJob("hangs", {})])
    await start_worker(registry, {"default": 4})  # a claim takes 2: filler, and hangs for a runner
    await wait_state(pool, first[1], "dead")
    await wait_state(pool, first[0], "completed")
    napped = await enqueue_many(pool, [NewJob("naps", {"trip": i % 2 == 1}) for i in range(8)])
    for i, job_id in enumerate(napped):
        await wait_state(pool, job_id, "dead" if i % 2 else "completed")
        error = await pool.fetchval("SELECT last_error FROM job WHERE id = $1", job_id)
        assert error is None if i % 2 == 0 else error["type"] == "RuntimeError"
    assert hung_on[0] in napped_on, "a job ran on the task the timed-out one was cancelled on"


async def test_what_a_handler_sets_in_a_contextvar_stays_with_its_job(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    registry = Registry()
    seen: list[str | None] = []
    var: contextvars.ContextVar[str | None] = contextvars.ContextVar("job_var", default=None)

    @registry.handler("sets")
    async def sets(ctx: JobContext) -> None:
        seen.append(var.get())
        var.set(f"job {ctx.id}")
        await asyncio.sleep(0)
        seen.append(var.get())

    @registry.handler("sets_and_ends")
    async def sets_and_ends(ctx: JobContext) -> None:
        # Ends in its first step, which the runner runs without a step of its own.
        seen.append(var.get())
        var.set(f"job {ctx.id}")

    await start_worker(registry, {"default": 1})
    kinds = ("sets", "sets_and_ends") * 3
    jobs = [await registry.enqueue(pool, kind, {}) for kind in kinds]
    for job in jobs:
        await wait_state(pool, job.id, "completed")
    expected = [[None, f"job {j.id}"] if k == "sets" else [None] for j, k in zip(jobs, kinds, strict=True)]
    assert seen == [x for each in expected for x in each]


async def test_a_batch_of_waiting_jobs_runs_at_once_on_as_many_tasks(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    registry = Registry()
    running = 0
    peak = 0
    gate = asyncio.Event()

    @registry.handler("waits")
    async def waits(ctx: JobContext) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await gate.wait()
        running -= 1

    await enqueue_many(pool, [NewJob("waits", {}) for _ in range(20)])
    await start_worker(registry, {"default": 20})
    await wait_until(lambda: now_true(peak == 20))
    gate.set()
    await wait_until(lambda: now_true(running == 0))


async def test_snooze_reschedules_without_spending_an_attempt(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    calls = 0
    registry = Registry()

    @registry.handler("poll_psp", max_attempts=1)
    async def poll_psp(ctx: JobContext) -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            ctx.snooze(0)
        return "settled"

    await start_worker(registry)
    job = await registry.enqueue(pool, "poll_psp", {})
    await wait_state(pool, job.id, "completed")
    assert calls == 3
    assert await pool.fetchval("SELECT attempt FROM job WHERE id = $1", job.id) == 1


async def test_long_snooze_leaves_the_job_scheduled(pool: asyncpg.Pool, start_worker: StartWorker) -> None:
    registry = Registry()

    @registry.handler("later")
    async def later(ctx: JobContext) -> None:
        ctx.snooze(3_600_000)

    await start_worker(registry)
    job = await enqueue(pool, "later", {})
    await wait_state(pool, job.id, "scheduled")
    assert await pool.fetchval("SELECT attempt FROM job WHERE id = $1", job.id) == 0


async def test_progress_is_recorded(pool: asyncpg.Pool, start_worker: StartWorker) -> None:
    registry = Registry()

    @registry.handler("report")
    async def report(ctx: JobContext) -> None:
        await ctx.progress(40)

    await start_worker(registry)
    job = await enqueue(pool, "report", {})
    await wait_state(pool, job.id, "completed")
    assert await pool.fetchval("SELECT progress FROM job WHERE id = $1", job.id) == 40


async def test_priority_orders_claims(pool: asyncpg.Pool, start_worker: StartWorker) -> None:
    order: list[int] = []
    registry = Registry()

    @registry.handler("p")
    async def p(ctx: JobContext) -> None:
        order.append(ctx.priority)

    await enqueue_many(pool, [NewJob("p", priority=prio) for prio in (5, 1, 3, -2, 4)])
    await start_worker(registry, {"default": 1})

    async def done() -> bool:
        return len(order) == 5

    await wait_until(done)
    assert order == [-2, 1, 3, 4, 5]


async def test_delayed_job_runs_after_its_time(pool: asyncpg.Pool, start_worker: StartWorker) -> None:
    registry = Registry()
    registry.register("tick", lambda ctx: None)
    await start_worker(registry)
    job = await enqueue(pool, "tick", {}, delay_ms=300)
    assert await job_state(pool, job.id) == "scheduled"
    await wait_state(pool, job.id, "completed")


async def test_pending_worker_options_are_validated() -> None:
    import pytest

    with pytest.raises(ValueError, match="at most half"):
        WorkerOptions(lease_ms=1_000, heartbeat_interval_ms=600)
    assert FAST.lease_ms == 2_000


async def test_worker_refuses_a_pool_too_small_for_its_pinned_connections(database_url: str) -> None:
    import pytest

    from paymanager.db.pool import create_pool
    from paymanager.jobs import Worker

    small = await create_pool(database_url, min_size=1, max_size=3)
    try:
        with pytest.raises(ValueError, match="must be at least 4"):
            Worker(small, database_url, Registry(), {"default": 1}, WorkerOptions(claim_pipeline=2))
    finally:
        await small.close()


async def test_claim_cooldown_gathers_jobs_arriving_meanwhile_into_one_claim(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    registry = Registry()

    @registry.handler("noop")
    async def noop(ctx: JobContext) -> None:
        del ctx

    options = WorkerOptions(
        owner="test",
        lease_ms=2_000,
        heartbeat_interval_ms=500,
        poll_interval_ms=5_000,
        claim_cooldown_ms=1_500,
    )
    await start_worker(registry, {"default": 10}, options)
    first = await enqueue(pool, "noop", {})
    await wait_state(pool, first.id, "completed")  # the first claim after a quiet spell runs at once
    # Five jobs in five transactions (five notifications) inside the cooldown the first claim began.
    later = [(await enqueue(pool, "noop", {"i": i})).id for i in range(5)]
    for job_id in later:
        await wait_state(pool, job_id, "completed")
    claims = await pool.fetchval(
        "SELECT count(DISTINCT attempted_at) FROM job WHERE id = ANY($1::bigint[])", later
    )
    assert claims == 1  # attempted_at is the claim's transaction time: one claim took all five


def claims_sent_beside(
    monkeypatch: pytest.MonkeyPatch, counts: Callable[[], bool] = lambda: True
) -> list[list[str]]:
    """The queues of each claim the worker sends while another of its claims is in flight (and
    `counts()` holds), recorded as the claims go out."""
    beside: list[list[str]] = []
    in_flight = 0

    async def recording(conn: Any, params: Any) -> Any:
        nonlocal in_flight
        if in_flight and counts():
            beside.append(list(params.queues))
        in_flight += 1
        try:
            return await claim(conn, params)
        finally:
            in_flight -= 1

    monkeypatch.setattr(worker_module, "claim", recording)
    return beside


async def test_a_small_queues_free_slot_waits_for_the_busy_queues_claim_not_beside_it(
    pool: asyncpg.Pool, start_worker: StartWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Beside a claim in flight, a claim goes for a full claim of the largest queue with work: a
    # small queue's one free slot, claimed alone beside the busy queue's claims, would cost a
    # statement (and its commit) for one job, and shrink the busy queue's batches around it.
    registry = Registry()

    @registry.handler("quick")
    async def quick(ctx: JobContext) -> None:
        del ctx

    @registry.handler("slow")
    async def slow(ctx: JobContext) -> None:
        await asyncio.sleep(0.01)

    started: list[Worker] = []
    # The queues of each claim sent while another was in flight and the busy queue had work.
    beside = claims_sent_beside(monkeypatch, lambda: bool(started) and started[0]._maybe_work["busy"])
    await enqueue_many(pool, [NewJob("quick", {"i": i}, queue="busy") for i in range(5_000)])
    small = await enqueue_many(pool, [NewJob("slow", {"i": i}, queue="small") for i in range(20)])
    started.append(await start_worker(registry, {"busy": 40, "small": 1}))
    for job_id in small:
        await wait_state(pool, job_id, "completed")
    assert beside  # the busy queue's backlog kept two claims in flight
    assert [queues for queues in beside if "busy" not in queues] == []


async def test_a_share_over_claim_batch_max_sends_a_full_claim_beside_one_in_flight(
    pool: asyncpg.Pool, start_worker: StartWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Concurrency 16, two claims in flight, claims of at most 5: a share (8) over claim_batch_max.
    # With the first claim's jobs running and the second claim out, 6 slots are free: room for a
    # full claim, which goes out beside the one in flight rather than after jobs end.
    registry = Registry()
    release = asyncio.Event()
    running = 0

    @registry.handler("held")
    async def held(ctx: JobContext) -> None:
        nonlocal running
        running += 1
        await release.wait()

    beside = claims_sent_beside(monkeypatch)
    await enqueue_many(pool, [NewJob("held", {"i": i}) for i in range(40)])
    await start_worker(registry, {"default": 16}, replace(FAST, claim_batch_max=5))
    try:
        # No job ends before `release`: every claim up to the 16 slots was sent while jobs ran.
        await wait_until(lambda: now_true(running == 16))
        assert beside
    finally:
        release.set()


async def test_a_worker_that_deletes_completed_jobs_keeps_no_row_but_a_flows_children(
    pool: asyncpg.Pool, database_url: str, start_worker: StartWorker
) -> None:
    ran: list[int] = []
    registry = Registry()

    @registry.handler("k")
    async def handle(ctx: JobContext) -> None:
        ran.append(ctx.id)

    async def completed_events(events: EventStream, ids: set[int]) -> None:
        seen: set[int] = set()
        while not ids <= seen:
            event = await events.next(timeout_s=30)
            if event.event == "completed":
                seen.add(event.id)

    async with EventStream(database_url) as events:
        await start_worker(registry, {"default": 10}, replace(FAST, delete_completed=True))
        plain = await enqueue_many(pool, [NewJob("k", {"i": i}) for i in range(200)])
        await completed_events(events, set(plain))
        # A batch holding a flow's child completes every job of it: the flow runs on its own here.
        root, (child,) = await enqueue_flow(pool, Flow(NewJob("k", {"root": True}), [NewJob("k", {})]))
        await completed_events(events, {root, child})
    assert sorted(ran) == sorted([*plain, root, child])
    # Every job's row is gone but the flow's child's, completed (its parent's trigger counted it:
    # the parent ran after it).
    left = {r["id"]: r["state"] for r in await pool.fetch("SELECT id, state FROM job")}
    assert left == {child: "completed"}
    assert ran.index(child) < ran.index(root)
