"""Fixtures for the job engine's integration tests: workers that are always stopped, the options and
registries most tests start them with, waits on a job's state or a worker's idleness, and the
statements that write completions run by hand."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from paymanager.jobs import EnqueueResult, JobContext, Registry, Worker, WorkerOptions, enqueue
from paymanager.jobs._queries import Q
from tests.support.waiting import wait_until as wait_until  # the jobs tests import it from here

# Short leases and intervals keep crash-like tests quick; they are correctness bounds, not timings.
FAST = WorkerOptions(owner="test", lease_ms=2_000, heartbeat_interval_ms=500, poll_interval_ms=200)

# No polling and no listener pings during a test: every claim comes from a NOTIFY.
QUIET = WorkerOptions(
    owner="lc", lease_ms=2_000, heartbeat_interval_ms=500, poll_interval_ms=3_600_000,
    listener_check_interval_ms=600_000,
)  # fmt: skip

StartWorker = Callable[..., Awaitable[Worker]]


# The statements that write completions, as the worker sends them.
COMPLETING_STATEMENTS = (
    "job_claim_batch", "job_claim_batch_deleting", "job_complete_many", "job_claim_limited",
    "job_claim_limited_deleting", "job_claim_batch_limited", "job_claim_batch_limited_deleting",
)  # fmt: skip


async def complete_by(
    db: asyncpg.Pool | asyncpg.Connection, statement: str, held: list[asyncpg.Record], *, notify: bool
) -> list[int]:
    """Complete the claimed rows `held` (no results) by `statement` of COMPLETING_STATEMENTS; a
    claim statement claims nothing meanwhile (a limited claim's, of the queue "default"; a batch's
    limited form takes the queue "default" with it, not the completed jobs' queues). The ids
    completed."""
    ids, tokens = [r["id"] for r in held], [r["lease_token"] for r in held]
    if statement == "job_complete_many":
        return [r["id"] for r in await db.fetch(Q[statement], ids, tokens, None, notify)]
    if statement.startswith("job_claim_limited"):
        deleting = statement.endswith("_deleting")
        args: tuple[object, ...] = ("default", 0, "t", 60_000, False, ids, tokens, None, notify, deleting)
        return [r["id"] for r in await db.fetch(Q["job_claim_limited"], *args) if not r["claimed"]]
    args = (["default"], [0], "t", 60_000, ids, tokens, None, notify, False)
    if "_limited" in statement:
        args = (*args, ["default"], [0])
    return [r["id"] for r in await db.fetch(Q[statement], *args) if not r["claimed"] and r["id"] is not None]


@pytest.fixture
async def start_worker(pool: asyncpg.Pool, database_url: str) -> AsyncIterator[StartWorker]:
    started: list[Worker] = []

    async def start(
        registry: Registry,
        queues: dict[str, int] | None = None,
        options: WorkerOptions = FAST,
        **kwargs: Any,
    ) -> Worker:
        worker = Worker(pool, database_url, registry, queues or {"default": 10}, options, **kwargs)
        await worker.start()
        started.append(worker)
        return worker

    yield start
    for worker in started:
        await worker.stop(timeout_s=2)


def counting_registry(ran: list[int]) -> Registry:
    """Kind "k", whose handler records each job id it runs in `ran`."""
    registry = Registry()

    async def handle(ctx: JobContext) -> None:
        ran.append(ctx.id)

    registry.register("k", handle)
    return registry


async def idle(worker: Worker) -> None:
    """Until the worker's start-up claim (every queue may have work) came back empty: a NOTIFY's claim
    goes to the listener only while no other claim is in flight."""

    async def idle_now() -> bool:
        return not worker._claims and not any(worker._maybe_work.values())

    await wait_until(idle_now)


async def job_state(pool: asyncpg.Pool, job_id: int) -> str:
    return str(await pool.fetchval("SELECT state FROM job WHERE id = $1", job_id))


async def wait_state(pool: asyncpg.Pool, job_id: int, state: str, timeout_s: float = 15.0) -> None:
    async def reached() -> bool:
        return await job_state(pool, job_id) == state

    await wait_until(reached, timeout_s)


async def start_a_slow_job(pool: asyncpg.Pool, start_worker: StartWorker) -> tuple[Worker, EnqueueResult]:
    """A worker (2 slots, the FAST options) running one job of kind "slow", which sleeps for 30 s."""
    started = asyncio.Event()
    registry = Registry()

    @registry.handler("slow")
    async def slow(ctx: JobContext) -> None:
        started.set()
        await asyncio.sleep(30)

    worker = await start_worker(registry, {"default": 2}, FAST)
    job = await enqueue(pool, "slow", {}, queue="default")
    await asyncio.wait_for(started.wait(), 10)
    return worker, job


async def a_completion_behind_a_held_claim(
    pool: asyncpg.Pool, start_worker: StartWorker, monkeypatch: pytest.MonkeyPatch
) -> tuple[Worker, int, Callable[[], None]]:
    """A worker (the FAST options) whose job "first" has ended, its completion pending: the claim
    that would write it is held before it reaches the database until the returned function opens
    it. Returns the worker, the job's id and that function; a second job, "second", is claimed once
    it is open."""
    from paymanager.jobs import worker as worker_module

    gate = asyncio.Event()
    claim_held = asyncio.Event()
    arm = False
    claim = worker_module.claim

    async def gated(db: Any, params: Any) -> Any:
        if arm:
            claim_held.set()
            await gate.wait()
        return await claim(db, params)

    monkeypatch.setattr(worker_module, "claim", gated)
    registry = Registry()

    async def first(ctx: JobContext) -> None:
        nonlocal arm
        arm = True
        # The enqueue's NOTIFY sends a claim out, held at the gate: the completion waits for it.
        await enqueue(pool, "second", {})
        await claim_held.wait()

    registry.register("first", first)
    registry.register("second", lambda ctx: None)
    worker = await start_worker(registry, {"default": 4}, FAST)
    first_id = (await enqueue(pool, "first", {})).id

    async def first_pending() -> bool:
        return any(ctx.id == first_id and worker._completer.is_pending(ctx) for ctx in worker._held)

    await wait_until(first_pending)

    def open_gate() -> None:
        nonlocal arm
        arm = False
        gate.set()

    return worker, first_id, open_gate
