"""Global concurrency per queue: at most N jobs of a queue running at once over every worker, beside
each worker's own concurrency."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from typing import Any

import asyncpg
import pytest

from paymanager.jobs import JobContext, NewJob, Registry, enqueue_many, set_global_concurrency, set_rate_limit
from paymanager.jobs import _limits as limits_module
from paymanager.jobs import worker as worker_module
from paymanager.jobs._queries import CHANNEL_AVAILABLE, Q
from paymanager.jobs.admin import list_queues
from tests.integration.jobs.conftest import COMPLETING_STATEMENTS, FAST, StartWorker, complete_by, wait_until
from tests.support.processes import paymanager_env, run_cli

QUEUE = "capped"
RUNNING = "SELECT count(*) FROM job WHERE queue = $1 AND state = 'running'"


async def test_global_concurrency_caps_the_running_jobs_of_a_queue_over_every_worker(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    await set_global_concurrency(pool, QUEUE, 3)
    release = asyncio.Event()
    seen_running: list[int] = []
    registry = Registry()

    @registry.handler("partner_call", queue=QUEUE)
    async def partner_call(ctx: JobContext) -> None:
        # Running jobs of the queue in the database at this job's start (its own claim committed).
        seen_running.append(int(await pool.fetchval(RUNNING, QUEUE)))
        await release.wait()

    # Three workers with 5 slots each: 15 slots for 12 jobs, only the global limit holds them back.
    workers = [await start_worker(registry, {QUEUE: 5}, replace(FAST, owner=f"w{n}")) for n in range(3)]
    await enqueue_many(pool, [NewJob("partner_call", {"i": i}, queue=QUEUE) for i in range(12)])

    async def three_running() -> bool:
        return int(await pool.fetchval(RUNNING, QUEUE)) == 3

    await wait_until(three_running)
    loads = [w.limited_queues.loads_done for w in workers]

    # Every worker polls (a chance to claim) three more times while the three jobs hold their slots.
    async def polled_three_times() -> bool:
        return all(w.limited_queues.loads_done >= n + 3 for w, n in zip(workers, loads, strict=True))

    await wait_until(polled_three_times)
    assert int(await pool.fetchval(RUNNING, QUEUE)) == 3
    assert sum(w.running_count for w in workers) == 3
    release.set()

    async def all_done() -> bool:
        done = "SELECT count(*) FROM job WHERE queue = $1 AND state = 'completed'"
        return int(await pool.fetchval(done, QUEUE)) == 12

    await wait_until(all_done)
    assert len(seen_running) == 12
    assert max(seen_running) <= 3, seen_running


async def test_a_job_finishing_in_one_worker_wakes_the_others_waiting_for_a_slot(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    await set_global_concurrency(pool, QUEUE, 1)
    release = asyncio.Event()
    ran: list[tuple[str, int]] = []

    def registry_of(owner: str) -> Registry:
        registry = Registry()

        @registry.handler("partner_call", queue=QUEUE)
        async def partner_call(ctx: JobContext) -> None:
            ran.append((owner, ctx.payload["i"]))
            if ctx.payload["i"] == 0:
                await release.wait()

        return registry

    # Polls an hour apart: only a NOTIFY can start the second job within the test.
    slow_poll = replace(FAST, poll_interval_ms=3_600_000)
    a = await start_worker(registry_of("a"), {QUEUE: 5}, replace(slow_poll, owner="a"))
    await enqueue_many(pool, [NewJob("partner_call", {"i": 0}, queue=QUEUE)])

    async def first_running() -> bool:
        return ran == [("a", 0)]

    await wait_until(first_running)
    b = await start_worker(registry_of("b"), {QUEUE: 5}, replace(slow_poll, owner="b"))
    claims = b.limited_queues.claims_sent
    await enqueue_many(pool, [NewJob("partner_call", {"i": 1}, queue=QUEUE)])

    # b tried the second job on its NOTIFY and was refused: the one slot is taken.
    async def b_tried() -> bool:
        return b.limited_queues.claims_sent > claims

    await wait_until(b_tried)
    assert ran == [("a", 0)]
    # a takes no more jobs: the second can only start on b, woken by a's finishing the first.
    a.stop_taking_work()
    release.set()

    async def second_ran() -> bool:
        return ("b", 1) in ran

    await wait_until(second_ran)


async def listening(database_url: str) -> tuple[asyncpg.Connection, asyncio.Queue[str]]:
    """A connection LISTENing on the channel that wakes a queue's workers, and what it hears."""
    heard: asyncio.Queue[str] = asyncio.Queue()
    conn = await asyncpg.connect(database_url)
    await conn.add_listener(CHANNEL_AVAILABLE, lambda *args: heard.put_nowait(args[3]))
    return conn, heard


async def heard_until_marker(pool: asyncpg.Pool, heard: asyncio.Queue[str]) -> list[str]:
    """What the listener heard before a marker NOTIFY sent now: all that came before it."""
    await pool.execute(f"NOTIFY {CHANNEL_AVAILABLE}, 'marker'")
    got: list[str] = []
    while (payload := await asyncio.wait_for(heard.get(), 10)) != "marker":
        got.append(payload)
    return got


@pytest.mark.parametrize("statement", COMPLETING_STATEMENTS)
async def test_a_completion_of_a_globally_limited_queue_wakes_its_workers_with_its_commit(
    pool: asyncpg.Pool, database_url: str, statement: str
) -> None:
    await set_global_concurrency(pool, QUEUE, 5)
    await enqueue_many(pool, [NewJob("partner_call", {}, queue=QUEUE) for _ in range(2)])
    await enqueue_many(pool, [NewJob("plain_call", {}, queue="plain") for _ in range(2)])
    capped = await pool.fetch("SELECT * FROM job_claim_limited($1, 2, 't', 60000, false)", QUEUE)
    plain = await pool.fetch(Q["job_claim_queue"], "plain", 2, "t", 60_000, False)
    listener, heard = await listening(database_url)
    try:
        for rows, woken in ((plain, []), (capped, [QUEUE])):
            assert len(await complete_by(pool, statement, rows, notify=False)) == 2
            got = await heard_until_marker(pool, heard)
            # One wake per statement for the queue with a global concurrency; none for a plain one.
            assert got == woken, (statement, got)
    finally:
        await listener.close()


async def test_a_worker_sends_no_wake_of_its_own_for_the_completions_it_writes(
    pool: asyncpg.Pool, database_url: str, start_worker: StartWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    await set_global_concurrency(pool, QUEUE, 2)
    wakes: list[list[str]] = []
    wake_queues = limits_module.wake_queues

    async def counted(db: Any, queues: list[str]) -> None:
        wakes.append(list(queues))
        await wake_queues(db, queues)

    monkeypatch.setattr(limits_module, "wake_queues", counted)
    registry = Registry()
    registry.register("partner_call", lambda ctx: None, queue=QUEUE)
    await start_worker(registry, {QUEUE: 5})
    listener, heard = await listening(database_url)
    try:
        await enqueue_many(pool, [NewJob("partner_call", {}, queue=QUEUE) for _ in range(6)])

        async def all_done() -> bool:
            return int(await pool.fetchval("SELECT count(*) FROM job WHERE state = 'completed'")) == 6

        await wait_until(all_done)
        # The completions' statements woke the queue (the enqueue's own NOTIFY is one of these).
        assert heard.qsize() >= 2
        assert wakes == []
    finally:
        await listener.close()


async def test_the_cli_sets_shows_and_removes_a_global_concurrency(
    pool: asyncpg.Pool, database_url: str
) -> None:
    code, out = await cli(database_url, "concurrency", "psp.wise", "5")
    assert (code, out.strip()) == (0, "queue psp.wise: global concurrency 5")
    code, out = await cli(database_url, "stats")
    assert "psp.wise (concurrency 5): empty" in out
    code, out = await cli(database_url, "concurrency", "psp.wise", "off")
    assert (code, out.strip()) == (0, "queue psp.wise: global concurrency off")
    [queue] = await list_queues(pool)
    assert queue.concurrency_max is None
    code, out = await cli(database_url, "concurrency", "psp.wise", "0")
    assert code == 2
    assert "must be within [1, 100000]" in out


async def cli(database_url: str, *args: str) -> tuple[int, str]:
    result = await asyncio.to_thread(run_cli, ["jobs", *args], paymanager_env(database_url))
    return result.returncode, result.stdout + result.stderr


# Index entries the statements of this transaction read from the job table's indexes so far.
INDEX_ENTRIES_READ = """
SELECT coalesce(sum(pg_stat_get_xact_tuples_returned(indexrelid)), 0)::bigint
  FROM pg_index WHERE indrelid = 'job'::regclass
"""


async def test_a_limited_claim_counts_only_its_own_queues_running_jobs(pool: asyncpg.Pool) -> None:
    # The running count is taken on every claim of a globally limited queue; if it walked the
    # running jobs of every queue, a busy plain queue beside it would slow each of those claims.
    await set_global_concurrency(pool, QUEUE, 3)
    busy = 300
    await enqueue_many(pool, [NewJob("plain_call", {"i": i}, queue="plain") for i in range(busy)])
    await enqueue_many(pool, [NewJob("partner_call", {}, queue=QUEUE)])
    claim = "SELECT claimed FROM job_claim_limited($1, $2, 'test', 60000, false)"
    assert len(await pool.fetch(claim, "plain", busy)) == busy
    async with pool.acquire() as conn, conn.transaction():
        before = int(await conn.fetchval(INDEX_ENTRIES_READ))
        assert [r["claimed"] for r in await conn.fetch(claim, QUEUE, 1)] == [True]
        read = int(await conn.fetchval(INDEX_ENTRIES_READ)) - before
    # The claim reads its queue's available job and its few running ones, not the other queue's.
    assert read < busy // 10, read


async def test_a_limited_claim_updates_the_jobs_it_picked_by_primary_key(pool: asyncpg.Pool) -> None:
    # The function's statements run on generic plans, which do not know how many jobs a claim
    # wants: with the table's statistics, the planner may join the picked jobs to the whole
    # primary key in id order, reading every older job (finished ones included) on each claim.
    await set_global_concurrency(pool, QUEUE, 3)
    older = 2_000
    await enqueue_many(pool, [NewJob("plain_call", {"i": i}, queue="plain") for i in range(older)])
    await enqueue_many(pool, [NewJob("partner_call", {}, queue=QUEUE)])
    await pool.execute("ANALYZE job")
    claim = "SELECT claimed FROM job_claim_limited($1, $2, 'test', 60000, false)"
    async with pool.acquire() as conn, conn.transaction():
        before = int(await conn.fetchval(INDEX_ENTRIES_READ))
        assert [r["claimed"] for r in await conn.fetch(claim, QUEUE, 1)] == [True]
        read = int(await conn.fetchval(INDEX_ENTRIES_READ)) - before
    assert read < older // 100, read


LIMITED_CLAIM = "SELECT * FROM job_claim_limited($1, $2, 't', 60000, false, $3, $4, NULL, false, $5)"


@pytest.mark.parametrize("delete", [False, True])
async def test_a_limited_claim_writes_its_completions_first_and_takes_the_slots_they_free(
    pool: asyncpg.Pool, delete: bool
) -> None:
    await set_global_concurrency(pool, QUEUE, 1)
    first, second = await enqueue_many(pool, [NewJob("partner_call", {}, queue=QUEUE) for _ in range(2)])
    [held] = [r for r in await pool.fetch(LIMITED_CLAIM, QUEUE, 5, [], [], False) if r["claimed"]]
    assert held["id"] == first
    # A completion under a token the job does not hold is refused: its slot stays taken.
    stale = await pool.fetch(LIMITED_CLAIM, QUEUE, 5, [first], [uuid.uuid4()], delete)
    assert stale == []
    rows = await pool.fetch(LIMITED_CLAIM, QUEUE, 5, [first], [held["lease_token"]], delete)
    assert [(r["claimed"], r["id"]) for r in rows] == [(False, first), (True, second)]
    state = await pool.fetchval("SELECT state::text FROM job WHERE id = $1", first)
    assert state == (None if delete else "completed")
    assert int(await pool.fetchval(RUNNING, QUEUE)) == 1


async def test_a_limited_claim_wakes_the_other_workers_only_for_a_slot_it_left_free(
    pool: asyncpg.Pool, database_url: str
) -> None:
    await set_global_concurrency(pool, QUEUE, 2)
    await set_global_concurrency(pool, "capped.other", 1)
    await enqueue_many(pool, [NewJob("partner_call", {}, queue=QUEUE) for _ in range(3)])
    await enqueue_many(pool, [NewJob("partner_call", {}, queue="capped.other")])
    a, b = [r for r in await pool.fetch(LIMITED_CLAIM, QUEUE, 2, [], [], False) if r["claimed"]]
    [other] = [r for r in await pool.fetch(LIMITED_CLAIM, "capped.other", 1, [], [], False) if r["claimed"]]
    listener, heard = await listening(database_url)
    try:
        # a's slot is taken again by the third job: nothing for another worker to claim.
        rows = await pool.fetch(LIMITED_CLAIM, QUEUE, 5, [a["id"]], [a["lease_token"]], False)
        assert sum(r["claimed"] for r in rows) == 1
        assert await heard_until_marker(pool, heard) == []
        # b's slot is left free (no job is waiting here; another worker's may be): woken.
        rows = await pool.fetch(LIMITED_CLAIM, QUEUE, 5, [b["id"]], [b["lease_token"]], False)
        assert [(r["claimed"], r["id"]) for r in rows] == [(False, b["id"])]
        assert await heard_until_marker(pool, heard) == [QUEUE]
        # A completion of another globally limited queue wakes that queue.
        rows = await pool.fetch(LIMITED_CLAIM, QUEUE, 5, [other["id"]], [other["lease_token"]], False)
        assert [(r["claimed"], r["id"]) for r in rows] == [(False, other["id"])]
        assert await heard_until_marker(pool, heard) == ["capped.other"]
    finally:
        await listener.close()


async def test_a_limited_claim_sends_no_wake_while_its_queues_rate_window_is_spent(
    pool: asyncpg.Pool, database_url: str
) -> None:
    # A slot freed while the window is spent can be taken by no process before the window opens:
    # waking the others would send each to find the window spent.
    await set_global_concurrency(pool, QUEUE, 2)
    await set_rate_limit(pool, QUEUE, max_jobs=1, window_ms=3_600_000)
    await enqueue_many(pool, [NewJob("partner_call", {}, queue=QUEUE) for _ in range(2)])
    [held] = [r for r in await pool.fetch(LIMITED_CLAIM, QUEUE, 2, [], [], False) if r["claimed"]]
    listener, heard = await listening(database_url)
    try:
        rows = await pool.fetch(LIMITED_CLAIM, QUEUE, 2, [held["id"]], [held["lease_token"]], False)
        assert [r["id"] for r in rows if not r["claimed"] and r["retry_after_ms"] is None] == [held["id"]]
        assert not any(r["claimed"] for r in rows)
        assert any(r["retry_after_ms"] is not None for r in rows)
        assert await heard_until_marker(pool, heard) == []
    finally:
        await listener.close()


async def test_a_worker_writes_a_globally_limited_queues_completions_with_its_next_claim(
    pool: asyncpg.Pool, start_worker: StartWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    await set_global_concurrency(pool, QUEUE, 2)
    carried: list[int] = []
    claim_limited = limits_module.claim_limited

    async def counted(db: Any, **kwargs: Any) -> Any:
        carried.append(len(kwargs["completions"]))
        return await claim_limited(db, **kwargs)

    monkeypatch.setattr(limits_module, "claim_limited", counted)
    registry = Registry()
    registry.register("partner_call", lambda ctx: None, queue=QUEUE)
    await start_worker(registry, {QUEUE: 5})
    jobs = await enqueue_many(pool, [NewJob("partner_call", {}, queue=QUEUE) for _ in range(20)])

    async def all_done() -> bool:
        return int(await pool.fetchval("SELECT count(*) FROM job WHERE state = 'completed'")) == len(jobs)

    await wait_until(all_done)
    # The claims that took the freed slots wrote the completions that freed them.
    assert sum(carried) > 0, carried
    assert int(await pool.fetchval("SELECT sum(attempt) FROM job")) == len(jobs)


async def test_a_limited_claim_starts_its_jobs_before_it_settles_the_completions_it_wrote(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    # Settling may wait (events published to Redis): the jobs the claim got must not wait with it.
    await set_global_concurrency(pool, QUEUE, 2)
    started: list[int] = []
    registry = Registry()
    registry.register("partner_call", lambda ctx: started.append(ctx.id), queue=QUEUE)
    worker = await start_worker(registry, {QUEUE: 5})
    claimed_last: list[int] = []
    started_while_settling: list[bool] = []
    claim, settled = worker.limited_queues.claim, worker._completer.settled

    async def recording_claim(*args: Any, **kwargs: Any) -> Any:
        got = await claim(*args, **kwargs)
        claimed_last[:] = [job.id for job in got.jobs]
        return got

    async def slow_settled(*args: Any) -> None:
        mine = list(claimed_last)
        await asyncio.sleep(0.01)
        started_while_settling.append(all(job_id in started for job_id in mine))
        await settled(*args)

    worker.limited_queues.claim = recording_claim  # type: ignore[method-assign]
    worker._completer.settled = slow_settled  # type: ignore[method-assign]
    jobs = await enqueue_many(pool, [NewJob("partner_call", {}, queue=QUEUE) for _ in range(20)])

    async def all_done() -> bool:
        return int(await pool.fetchval("SELECT count(*) FROM job WHERE state = 'completed'")) == len(jobs)

    await wait_until(all_done)
    assert started_while_settling, "the limited claims carried completions"
    assert all(started_while_settling), started_while_settling


# --- a limited queue claimed by a batch claim's statement (job_claim_batch_limited) ----------------


async def batch_claim(
    db: asyncpg.Pool | asyncpg.Connection, plain: int, done: list[asyncpg.Record], limited: dict[str, int]
) -> list[asyncpg.Record]:
    """A worker's batch claim: up to `plain` jobs of the queue "plain", the jobs `done` completed
    first, and the `limited` queues taken with it."""
    ids, tokens = [r["id"] for r in done], [r["lease_token"] for r in done]
    return await db.fetch(
        Q["job_claim_batch_limited"], ["plain"], [plain], "t", 60_000, ids, tokens, None, False, not done,
        list(limited), list(limited.values()),
    )  # fmt: skip


def claimed_of(rows: list[asyncpg.Record], queue: str) -> list[asyncpg.Record]:
    return [r for r in rows if r["claimed"] and r["queue"] == queue]


async def test_a_batch_claim_takes_a_limited_queues_slots_its_own_completions_freed(
    pool: asyncpg.Pool,
) -> None:
    await set_global_concurrency(pool, QUEUE, 1)
    first, second = await enqueue_many(pool, [NewJob("partner_call", {}, queue=QUEUE) for _ in range(2)])
    await enqueue_many(pool, [NewJob("plain_call", {}, queue="plain") for _ in range(4)])
    rows = await batch_claim(pool, 2, [], {QUEUE: 5})
    [held] = claimed_of(rows, QUEUE)
    assert held["id"] == first
    assert len(claimed_of(rows, "plain")) == 2
    # The slot is taken: a claim that completes nothing of the queue gets none of it.
    assert claimed_of(await batch_claim(pool, 1, [], {QUEUE: 5}), QUEUE) == []
    # Completed by the same statement, before the queue's running jobs are counted: its slot is free.
    rows = await batch_claim(pool, 1, [held], {QUEUE: 5})
    assert [r["id"] for r in rows if not r["claimed"] and r["id"] is not None] == [first]
    assert [r["id"] for r in claimed_of(rows, QUEUE)] == [second]
    assert len(claimed_of(rows, "plain")) == 1
    assert int(await pool.fetchval(RUNNING, QUEUE)) == 1


async def test_a_batch_claim_never_waits_for_another_claim_of_a_limited_queue(
    pool: asyncpg.Pool, database_url: str
) -> None:
    # A batch claim carries the worker's plain queues: waiting for the queue's row, held by another
    # process's claim of it until that one commits, would hold them all back.
    await set_global_concurrency(pool, QUEUE, 2)
    await enqueue_many(pool, [NewJob("partner_call", {}, queue=QUEUE)])
    await enqueue_many(pool, [NewJob("plain_call", {}, queue="plain")])
    other = await asyncpg.connect(database_url)
    try:
        claiming = other.transaction()
        await claiming.start()
        await other.execute("SELECT 1 FROM job_queue WHERE name = $1 FOR UPDATE", QUEUE)
        async with pool.acquire() as conn:
            # A wait for the row would end in an error here, long before the other claim ends.
            await conn.execute("SET lock_timeout = '50ms'")
            rows = await batch_claim(conn, 1, [], {QUEUE: 5})
            await conn.execute("RESET lock_timeout")
        assert len(claimed_of(rows, "plain")) == 1
        # The queue is named as held back, with no window to wait for: the next claim tries it.
        held_back = [(r["claimed"], r["queue"], r["retry_after_ms"]) for r in rows if r["id"] is None]
        assert held_back == [(False, QUEUE, None)]
        await claiming.rollback()
    finally:
        await other.close()
    assert len(claimed_of(await batch_claim(pool, 0, [], {QUEUE: 5}), QUEUE)) == 1


async def test_a_batch_claim_wakes_the_other_workers_only_for_a_limited_slot_it_left_free(
    pool: asyncpg.Pool, database_url: str
) -> None:
    await set_global_concurrency(pool, QUEUE, 2)
    await enqueue_many(pool, [NewJob("partner_call", {}, queue=QUEUE) for _ in range(3)])
    a, b = claimed_of(await batch_claim(pool, 0, [], {QUEUE: 2}), QUEUE)
    listener, heard = await listening(database_url)
    try:
        # a's slot is taken again by the third job: nothing for another worker to claim.
        assert len(claimed_of(await batch_claim(pool, 0, [a], {QUEUE: 5}), QUEUE)) == 1
        assert await heard_until_marker(pool, heard) == []
        # b's slot is left free: woken.
        assert claimed_of(await batch_claim(pool, 0, [b], {QUEUE: 5}), QUEUE) == []
        assert await heard_until_marker(pool, heard) == [QUEUE]
    finally:
        await listener.close()


async def test_a_busy_plain_queues_claims_take_a_globally_limited_queue_with_them_within_its_limit(
    pool: asyncpg.Pool, start_worker: StartWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    await set_global_concurrency(pool, QUEUE, 2)
    seen_running: list[int] = []
    taken_along: list[int] = []
    claim = worker_module.claim

    async def recording(db: Any, params: Any) -> Any:
        got = await claim(db, params)
        if params.limited:
            taken_along.extend(job.id for job in got.jobs if job.queue == QUEUE)
        return got

    monkeypatch.setattr(worker_module, "claim", recording)
    registry = Registry()

    @registry.handler("partner_call", queue=QUEUE)
    async def partner_call(ctx: JobContext) -> None:
        seen_running.append(int(await pool.fetchval(RUNNING, QUEUE)))
        await asyncio.sleep(0.01)

    @registry.handler("plain_call", queue="plain")
    async def plain_call(ctx: JobContext) -> None:
        await asyncio.sleep(0.002)

    # Slots for every capped job in each worker: only the global limit holds them back.
    for n in range(2):
        await start_worker(registry, {"plain": 10, QUEUE: 20}, replace(FAST, owner=f"w{n}"))
    await enqueue_many(pool, [NewJob("plain_call", {"i": i}, queue="plain") for i in range(3_000)])
    await enqueue_many(pool, [NewJob("partner_call", {"i": i}, queue=QUEUE) for i in range(20)])

    async def all_done() -> bool:
        done = "SELECT count(*) FROM job WHERE state = 'completed'"
        return int(await pool.fetchval(done)) == 3_020

    await wait_until(all_done)
    assert len(seen_running) == 20
    assert max(seen_running) <= 2, seen_running
    # The plain queue's claims took the capped queue's jobs with them while they went out.
    assert taken_along, "no capped job was claimed by a plain claim's statement"
    assert int(await pool.fetchval("SELECT max(attempt) FROM job")) == 1


async def test_a_worker_holding_a_queues_whole_global_concurrency_sends_no_claim_for_it(
    pool: asyncpg.Pool, start_worker: StartWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # While this process runs as many jobs of a queue as its global concurrency allows, no process
    # can start one: an enqueue's NOTIFY must not send a claim to read the queue's row and count
    # its running jobs for nothing, whether taken along by a plain claim or a claim of its own.
    await set_global_concurrency(pool, QUEUE, 2)
    claims_of_queue = 0
    claim, claim_limited = worker_module.claim, limits_module.claim_limited

    async def recording(db: Any, params: Any) -> Any:
        nonlocal claims_of_queue
        claims_of_queue += QUEUE in params.limited
        return await claim(db, params)

    async def recording_limited(db: Any, **kwargs: Any) -> Any:
        nonlocal claims_of_queue
        claims_of_queue += kwargs["queue"] == QUEUE
        return await claim_limited(db, **kwargs)

    monkeypatch.setattr(worker_module, "claim", recording)
    monkeypatch.setattr(limits_module, "claim_limited", recording_limited)
    release = asyncio.Event()
    registry = Registry()

    @registry.handler("partner_call", queue=QUEUE)
    async def partner_call(ctx: JobContext) -> None:
        await release.wait()

    @registry.handler("plain_call", queue="plain")
    async def plain_call(ctx: JobContext) -> None:
        del ctx

    await start_worker(registry, {"plain": 10, QUEUE: 5})
    await enqueue_many(pool, [NewJob("partner_call", {"i": i}, queue=QUEUE) for i in range(2)])

    async def two_running() -> bool:
        return int(await pool.fetchval(RUNNING, QUEUE)) == 2

    await wait_until(two_running)
    before = claims_of_queue
    # Each enqueue NOTIFYs the queue's workers; a plain job after them, on the same channel, is
    # claimed only once the worker has gone through their wake-ups.
    for i in range(5):
        await enqueue_many(pool, [NewJob("partner_call", {"later": i}, queue=QUEUE)])
    [plain] = await enqueue_many(pool, [NewJob("plain_call", {}, queue="plain")])

    async def plain_done() -> bool:
        return await pool.fetchval("SELECT state FROM job WHERE id = $1", plain) == "completed"

    await wait_until(plain_done)
    assert claims_of_queue == before
    release.set()

    async def all_done() -> bool:
        done = "SELECT count(*) FROM job WHERE queue = $1 AND state = 'completed'"
        return int(await pool.fetchval(done, QUEUE)) == 7

    await wait_until(all_done)
    assert claims_of_queue > before
