"""Claims that complete nothing commit without waiting for their WAL flush; every completion waits.

The argument (docs/ARCHITECTURE.md, "Claims commit quickly"): a claim lost with the server's last
unflushed WAL leaves its jobs as a crashed worker's would be, available again, and the worker's
completion is refused by its lease token. Anything durable written after the claim, a completion or
a handler's own transaction, flushes the claim with it, WAL being written in order.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import asyncpg
import pytest

from paymanager.jobs import JobContext, NewJob, Registry, enqueue, enqueue_many
from paymanager.jobs import _completer as completer_module
from paymanager.jobs._queries import Q
from paymanager.jobs._store import Job
from tests.integration.jobs.conftest import FAST, StartWorker, a_completion_behind_a_held_claim, wait_until
from tests.support.locks import finishes_without_waiting

CLAIM_ARGS = {
    # statement: the arguments of a claim of up to 10 jobs of `default` that completes nothing
    "job_claim": lambda quick: (["default"], [10], "t", 30_000, quick),
    "job_claim_queue": lambda quick: ("default", 10, "t", 30_000, quick),
    "job_claim_batch": lambda quick: (["default"], [10], "t", 30_000, [], [], [], False, quick),
    "job_claim_batch_deleting": lambda quick: (["default"], [10], "t", 30_000, [], [], [], False, quick),
}


def claim_seen(query: str, args: tuple[Any, ...]) -> tuple[int, bool] | None:
    """(completions written, quick) of a claim statement the worker sent; None for other statements."""
    if query in (Q["job_claim"], Q["job_claim_queue"]):
        return 0, args[4]
    if query in (Q["job_claim_batch"], Q["job_claim_batch_deleting"]):
        return len(args[4]), args[8]
    return None


async def commit_setting_after_claim(conn: asyncpg.Connection, statement: str, quick: bool) -> str:
    """`synchronous_commit` as a claim statement that completes nothing leaves it for its commit."""
    async with conn.transaction():
        rows = await conn.fetch(Q[statement], *CLAIM_ARGS[statement](quick))
        assert [row["claimed"] for row in rows] == [True]
        setting = str(await conn.fetchval("SHOW synchronous_commit"))
    # The setting was the transaction's own: the next transaction is back to the session's.
    assert await conn.fetchval("SHOW synchronous_commit") == "on"
    return setting


async def test_the_claim_statement_turns_off_the_wait_for_its_flush_only_when_asked(
    pool: asyncpg.Pool,
) -> None:
    async with pool.acquire() as conn:
        for statement in CLAIM_ARGS:
            for quick, setting in ((False, "on"), (True, "off")):
                await enqueue(pool, "k", {})
                assert await commit_setting_after_claim(conn, statement, quick) == setting, statement


async def test_a_worker_claims_quickly_only_when_the_claim_writes_no_completion(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    seen: list[tuple[int, bool]] = []  # (completions written, quick) per claim statement
    registry = Registry()
    done: list[int] = []

    async def handle(ctx: JobContext) -> None:
        done.append(ctx.id)
        await asyncio.sleep(0)

    registry.register("k", handle)
    worker = await start_worker(registry, {"default": 4}, FAST)
    for conn in worker._all_conns:  # the claim connections: record what each claim asks for
        fetch = conn.fetch

        async def recording(query: str, *args: Any, _fetch: Any = fetch) -> Any:
            if (claim := claim_seen(query, args)) is not None:
                seen.append(claim)
            return await _fetch(query, *args)

        conn.fetch = recording  # type: ignore[method-assign]
    # A trickle (quick claims into an idle worker), then a backlog bigger than the slots (claims
    # that carry the previous batch's completions).
    for n in range(1, 4):
        await enqueue(pool, "k", {})
        await wait_until(lambda n=n: _at_least(done, n))
    await enqueue_many(pool, [NewJob("k", {}) for _ in range(200)])
    await wait_until(lambda: _at_least(done, 203))
    assert any(quick for n, quick in seen if n == 0)
    assert any(n > 0 for n, _ in seen), "the backlog's claims carried completions"
    assert all(not quick for n, quick in seen if n > 0), seen
    assert all(quick for n, quick in seen if n == 0), seen


async def test_quick_claims_can_be_turned_off(pool: asyncpg.Pool, start_worker: StartWorker) -> None:
    seen: list[bool] = []
    registry = Registry()
    registry.register("k", lambda ctx: None)
    options = dataclasses.replace(FAST, quick_claim_commit=False)
    worker = await start_worker(registry, {"default": 4}, options)
    for conn in worker._all_conns:
        fetch = conn.fetch

        async def recording(query: str, *args: Any, _fetch: Any = fetch) -> Any:
            if (claim := claim_seen(query, args)) is not None:
                seen.append(claim[1])
            return await _fetch(query, *args)

        conn.fetch = recording  # type: ignore[method-assign]
    job = await enqueue(pool, "k", {})
    await wait_until(lambda: _state_is(pool, job.id, "completed"))
    assert seen
    assert not any(seen)


async def _at_least(done: list[int], n: int) -> bool:
    return len(done) >= n


async def _state_is(pool: asyncpg.Pool, job_id: int, state: str) -> bool:
    return bool(await pool.fetchval("SELECT state = $2 FROM job WHERE id = $1", job_id, state))


async def test_the_idle_claims_and_the_batch_claim_take_the_same_jobs(pool: asyncpg.Pool) -> None:
    """job_claim is job_claim_batch without completions, job_claim_queue is job_claim for one queue:
    the same order, limits, paused queues and columns."""
    for priority in (5, -1, 0, 0, 3):
        await enqueue(pool, "k", {"p": priority}, queue="a", priority=priority)
    for _ in range(3):
        await enqueue(pool, "k", {}, queue="paused")
        await enqueue(pool, "k", {}, queue="c")
    await pool.execute("INSERT INTO job_queue (name, paused) VALUES ('paused', true)")
    wanted = {"a": 3, "paused": 5, "c": 1, "empty": 4}
    several = (list(wanted), list(wanted.values()), "t", 30_000)
    claims: list[tuple[str, tuple[Any, ...]]] = [
        ("job_claim", (*several, True)),
        ("job_claim_batch", (*several, [], [], [], True, True)),
        ("job_claim_batch_deleting", (*several, [], [], [], True, True)),
        ("job_claim_queue", tuple((q, n, "t", 30_000, True) for q, n in wanted.items())),
    ]
    taken: dict[str, list[tuple[Any, ...]]] = {}
    async with pool.acquire() as conn:
        for statement, args in claims:
            transaction = conn.transaction()
            await transaction.start()
            # job_claim_queue claims from each queue in turn, the others from all at once.
            calls = args if statement == "job_claim_queue" else (args,)
            rows = [row for call in calls for row in await conn.fetch(Q[statement], *call)]
            taken[statement] = sorted((r["queue"], r["priority"], r["attempt"], r["claimed"]) for r in rows)
            assert {tuple(r.keys()) for r in rows} == {CLAIMED_COLUMNS}, statement
            # The worker reads these rows by position (Job.from_claim_row).
            assert [Job.from_claim_row(r) for r in rows] == [Job.from_row(r) for r in rows], statement
            await transaction.rollback()
    assert taken["job_claim"] == taken["job_claim_batch"] == taken["job_claim_queue"]
    assert taken["job_claim_batch_deleting"] == taken["job_claim_batch"]
    assert taken["job_claim"] == [
        ("a", -1, 1, True), ("a", 0, 1, True), ("a", 0, 1, True), ("c", 0, 1, True),
    ]  # fmt: skip


CLAIMED_COLUMNS = (
    "claimed", "id", "queue", "kind", "payload", "priority", "attempt", "max_attempts", "backoff",
    "timeout_ms", "lease_token", "parent_id", "cancel_requested", "waited_s",
)  # fmt: skip


def test_the_claimed_columns_are_the_claim_row_fields_in_order() -> None:
    assert CLAIMED_COLUMNS[1:] == tuple(field.name for field in dataclasses.fields(Job))


async def test_a_claim_starts_its_jobs_before_it_settles_the_completions_it_wrote(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    # Settling may wait (events published to Redis): the jobs the claim got must not wait with it.
    registry = Registry()
    done: list[int] = []

    async def handle(ctx: JobContext) -> None:
        done.append(ctx.id)

    registry.register("k", handle)
    worker = await start_worker(registry, {"default": 4}, FAST)
    claimed_last: list[Any] = []
    ran_while_settling: list[bool] = []
    claimed, settled = worker._claimed, worker._completer.settled

    def recording_claimed(*args: Any) -> Any:
        starts, completed = claimed(*args)
        claimed_last[:] = [held for _, held, _ in starts]
        return starts, completed

    async def slow_settled(*args: Any) -> None:
        mine = list(claimed_last)  # the other claim in flight may come back meanwhile
        await asyncio.sleep(0.01)
        # The claim's jobs (no-ops) ran while this settle waited.
        ran_while_settling.append(all(held.ctx.id in done for held in mine))
        await settled(*args)

    worker._claimed = recording_claimed  # type: ignore[method-assign]
    worker._completer.settled = slow_settled  # type: ignore[method-assign]
    await enqueue_many(pool, [NewJob("k", {}) for _ in range(100)])
    await wait_until(lambda: _at_least(done, 100))
    assert ran_while_settling, "the backlog's claims carried completions"
    assert all(ran_while_settling), ran_while_settling


async def test_each_claim_skips_a_job_another_transaction_has_locked_and_takes_the_others(
    pool: asyncpg.Pool,
) -> None:
    """FOR UPDATE SKIP LOCKED: a claim never waits behind a row locked elsewhere (a shared settlement
    transaction, another claim); it takes the next jobs instead, and leaves the locked one."""
    for statement in CLAIM_ARGS:
        await pool.execute("DELETE FROM job")
        first = await enqueue(pool, "k", {}, priority=-1)  # the claim's first pick, were it free
        others = {(await enqueue(pool, "k", {})).id for _ in range(2)}
        async with pool.acquire() as holder, pool.acquire() as claimer:
            held = holder.transaction()
            await held.start()
            await holder.execute("SELECT 1 FROM job WHERE id = $1 FOR UPDATE", first.id)
            claim = claimer.fetch(Q[statement], *CLAIM_ARGS[statement](False))
            finished, task = await finishes_without_waiting(pool, holder.get_server_pid(), claim)
            await held.rollback()  # lets a claim that did wait end, before the test fails
            claimed = {row["id"] for row in await task}
            assert finished, f"{statement} waited for the locked job instead of skipping it"
            assert claimed == others, statement
        assert await pool.fetchval("SELECT state FROM job WHERE id = $1", first.id) == "available"


async def test_a_completion_waits_for_the_claim_out_and_is_written_once_it_is_back(
    pool: asyncpg.Pool, start_worker: StartWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # While a claim is out, the claim launched when it comes back writes the completions: one the
    # completer wrote meanwhile would be a statement and a commit of its own.
    written: list[list[int]] = []
    complete_many = completer_module.complete_many

    async def recording(db: Any, completions: Any, **kwargs: Any) -> Any:
        written.append([c.id for c in completions])
        return await complete_many(db, completions, **kwargs)

    monkeypatch.setattr(completer_module, "complete_many", recording)
    _, first_id, open_gate = await a_completion_behind_a_held_claim(pool, start_worker, monkeypatch)
    # Turns of the loop and a poll interval's worth of time: the completion stays with the claim.
    await asyncio.sleep(0.3)
    assert written == []
    assert await pool.fetchval("SELECT state::text FROM job WHERE id = $1", first_id) == "running"
    open_gate()

    async def all_completed() -> bool:
        return int(await pool.fetchval("SELECT count(*) FROM job WHERE state = 'completed'")) == 2

    await wait_until(all_completed)
