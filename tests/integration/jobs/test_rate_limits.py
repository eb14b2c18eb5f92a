"""Rate limits per queue, cluster-wide: at most N jobs started per window over every worker, and a
handler's RateLimitedError pausing its queue without spending an attempt."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import pytest

from paymanager.jobs import (
    JobContext,
    NewJob,
    RateLimitedError,
    Registry,
    enqueue,
    enqueue_many,
    set_rate_limit,
)
from paymanager.jobs import worker as worker_module
from paymanager.jobs.admin import format_rate_limit, list_queues, parse_rate_limit
from tests.integration.jobs.conftest import FAST, StartWorker, wait_until
from tests.support.processes import paymanager_env, run_cli

QUEUE = "rated"
# Starts per window, grouped by the window each start falls in: windows are consecutive spans of
# window_ms from the Unix epoch, and a limited claim's attempted_at is the time it was counted at.
STARTS_PER_WINDOW = """
SELECT floor(extract(epoch FROM attempted_at) * 1000 / $2)::bigint AS win, count(*) AS n
  FROM job WHERE queue = $1 AND attempted_at IS NOT NULL GROUP BY win ORDER BY win
"""


def _noop_registry(started: list[int] | None = None) -> Registry:
    registry = Registry()

    @registry.handler("noop", queue=QUEUE)
    async def noop(ctx: JobContext) -> None:
        if started is not None:
            started.append(ctx.id)

    return registry


async def _all_completed(pool: asyncpg.Pool, queue: str, count: int) -> bool:
    done = await pool.fetchval("SELECT count(*) FROM job WHERE queue = $1 AND state = 'completed'", queue)
    return int(done) == count


async def test_a_rate_limit_caps_the_jobs_started_per_window_over_every_worker(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    await set_rate_limit(pool, QUEUE, max_jobs=3, window_ms=200)
    await enqueue_many(pool, [NewJob("noop", {"i": i}, queue=QUEUE) for i in range(15)])
    # Three workers sharing the queue, each with slots for every job: only the limit holds them back.
    for n in range(3):
        await start_worker(_noop_registry(), {QUEUE: 20}, replace(FAST, owner=f"w{n}"))

    async def all_done() -> bool:
        return await _all_completed(pool, QUEUE, 15)

    await wait_until(all_done)
    windows = await pool.fetch(STARTS_PER_WINDOW, QUEUE, 200)
    assert max(row["n"] for row in windows) <= 3, [dict(r) for r in windows]
    assert sum(row["n"] for row in windows) == 15
    assert len(windows) >= 5
    # Held back by the limit, no job spent an attempt waiting for a window.
    assert await pool.fetchval("SELECT max(attempt) FROM job WHERE queue = $1", QUEUE) == 1


async def test_over_the_limit_jobs_stay_available_and_the_worker_sends_no_claim_until_the_window_opens(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    # A window long enough that this test never sees the next one open.
    window_ms = await _window_with_an_hour_left(pool)
    await set_rate_limit(pool, QUEUE, max_jobs=2, window_ms=window_ms)
    started: list[int] = []
    worker = await start_worker(_noop_registry(started), {QUEUE: 10}, FAST)
    await enqueue_many(pool, [NewJob("noop", {"i": i}, queue=QUEUE) for i in range(5)])

    async def two_done() -> bool:
        return await _all_completed(pool, QUEUE, 2)

    await wait_until(two_done)
    limited = worker.limited_queues
    claims, loads = limited.claims_sent, limited.loads_done
    # More jobs (each enqueue NOTIFYs the worker) and several polls, each a chance to claim again.
    for i in range(3):
        await enqueue(pool, "noop", {"late": i}, queue=QUEUE)

    async def polled_three_times() -> bool:
        return limited.loads_done >= loads + 3

    await wait_until(polled_three_times)
    assert limited.claims_sent == claims
    assert len(started) == 2
    states = await pool.fetch(
        "SELECT state, attempt FROM job WHERE queue = $1 AND state <> 'completed'", QUEUE
    )
    assert {(r["state"], r["attempt"]) for r in states} == {("available", 0)}
    assert len(states) == 6


async def test_a_busy_plain_queues_claims_hold_a_rate_limited_queue_they_take_along_to_its_window(
    pool: asyncpg.Pool, start_worker: StartWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    window_ms = await _window_with_an_hour_left(pool)
    await set_rate_limit(pool, QUEUE, max_jobs=3, window_ms=window_ms)
    held_back: list[int | None] = []
    claim = worker_module.claim

    async def recording(db: Any, params: Any) -> Any:
        got = await claim(db, params)
        held_back.extend(got.held_back.values())
        return got

    monkeypatch.setattr(worker_module, "claim", recording)
    registry = _noop_registry()

    @registry.handler("plain_call", queue="plain")
    async def plain_call(ctx: JobContext) -> None:
        await asyncio.sleep(0.002)

    worker = await start_worker(registry, {"plain": 10, QUEUE: 10}, FAST)
    # No claim of the rated queue's own: only the plain claims can take it.
    monkeypatch.setattr(worker, "_launch_limited_claims", lambda: None)
    await enqueue_many(pool, [NewJob("plain_call", {"i": i}, queue="plain") for i in range(2_000)])
    await enqueue_many(pool, [NewJob("noop", {"i": i}, queue=QUEUE) for i in range(6)])

    async def plain_done() -> bool:
        return await _all_completed(pool, "plain", 2_000)

    async def three_done() -> bool:
        return await _all_completed(pool, QUEUE, 3)

    await wait_until(plain_done)
    await wait_until(three_done)
    # Three started in the window, taken along by the plain claims, whose statement named the
    # window's end; the others wait for it, available, no attempt spent.
    assert held_back, "no claim named the window's end"
    assert all(ms is not None and ms > 0 for ms in held_back), held_back
    assert worker.limited_queues.is_blocked(QUEUE)
    left = "SELECT state, attempt FROM job WHERE queue = $1 AND state <> 'completed'"
    states = await pool.fetch(left, QUEUE)
    assert [(r["state"], r["attempt"]) for r in states] == [("available", 0)] * 3


async def test_a_rate_limit_set_at_run_time_reaches_a_running_worker(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    worker = await start_worker(_noop_registry(), {QUEUE: 10}, FAST)
    window_ms = await _window_with_an_hour_left(pool)
    await set_rate_limit(pool, QUEUE, max_jobs=1, window_ms=window_ms)

    async def limited() -> bool:
        return QUEUE in worker.limited_queues.limits

    await wait_until(limited)
    await enqueue_many(pool, [NewJob("noop", {"i": i}, queue=QUEUE) for i in range(3)])

    async def one_done() -> bool:
        return await _all_completed(pool, QUEUE, 1)

    await wait_until(one_done)
    assert worker.limited_queues.is_blocked(QUEUE)
    # `off` takes the limit away: the queue goes back to the plain claims and drains.
    await set_rate_limit(pool, QUEUE, max_jobs=None)

    async def all_done() -> bool:
        return await _all_completed(pool, QUEUE, 3)

    await wait_until(all_done)
    assert QUEUE not in worker.limited_queues.limits


async def test_a_rate_limited_handler_gives_its_job_back_without_an_attempt_and_pauses_the_queue(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    attempts: dict[int, list[int]] = {}
    refused_at: list[datetime] = []
    registry = Registry()

    @registry.handler("call_partner", queue="psp.test")
    async def call_partner(ctx: JobContext) -> None:
        attempts.setdefault(ctx.id, []).append(ctx.attempt)
        if ctx.payload.get("refused") and len(attempts[ctx.id]) == 1:
            refused_at.append(await pool.fetchval("SELECT clock_timestamp()"))
            raise RateLimitedError(retry_after_ms=500)

    # Two workers: the pause must hold the one that did not meet the refusal too.
    for n in range(2):
        await start_worker(registry, {"psp.test": 5}, replace(FAST, owner=f"w{n}"))
    refused = await enqueue(pool, "call_partner", {"refused": True}, queue="psp.test")

    async def paused() -> bool:
        paused_until = "SELECT rate_paused_until FROM job_queue WHERE name = 'psp.test'"
        return await pool.fetchval(paused_until) is not None

    await wait_until(paused)
    others = [(await enqueue(pool, "call_partner", {"i": i}, queue="psp.test")).id for i in range(4)]

    async def all_done() -> bool:
        return await _all_completed(pool, "psp.test", 5)

    await wait_until(all_done)
    # The refused attempt was given back: the job ran again as its first attempt, and no error stays.
    assert attempts[refused.id] == [1, 1]
    row = await pool.fetchrow("SELECT attempt, errors, last_error FROM job WHERE id = $1", refused.id)
    assert (row["attempt"], row["errors"], row["last_error"]) == (1, [], None)
    assert all(attempts[i] == [1] for i in others)
    # Nothing of the queue started within the pause asked for, on either worker.
    starts = [
        r["attempted_at"] for r in await pool.fetch("SELECT attempted_at FROM job WHERE queue = 'psp.test'")
    ]
    assert min(starts) >= refused_at[0] + timedelta(milliseconds=500), (refused_at, starts)


async def test_the_cli_sets_shows_and_removes_a_rate_limit(pool: asyncpg.Pool, database_url: str) -> None:
    code, out = await cli(database_url, "rate-limit", "psp.ipps", "100/1s")
    assert (code, out.strip()) == (0, "queue psp.ipps: rate limit 100/1s")
    await enqueue(pool, "k", {}, queue="psp.ipps")
    code, out = await cli(database_url, "stats")
    assert "psp.ipps (rate 100/1s): available=1" in out
    code, out = await cli(database_url, "rate-limit", "psp.ipps", "off")
    assert (code, out.strip()) == (0, "queue psp.ipps: rate limit off")
    [queue] = await list_queues(pool)
    assert (queue.rate_max, queue.rate_window_ms) == (None, None)
    code, out = await cli(database_url, "rate-limit", "psp.ipps", "100 per second")
    assert code == 2
    assert "must read N/WINDOW" in out


def test_rate_limits_read_and_print_as_n_per_window() -> None:
    assert parse_rate_limit("100/1s") == (100, 1_000)
    assert parse_rate_limit("5/500ms") == (5, 500)
    assert parse_rate_limit("600/m") == (600, 60_000)
    assert parse_rate_limit(" OFF ") is None
    assert format_rate_limit(100, 1_000) == "100/1s"
    assert format_rate_limit(600, 60_000) == "600/1m"
    assert format_rate_limit(5, 500) == "5/500ms"


async def cli(database_url: str, *args: str) -> tuple[int, str]:
    result = await asyncio.to_thread(run_cli, ["jobs", *args], paymanager_env(database_url))
    return result.returncode, result.stdout + result.stderr


async def _window_with_an_hour_left(pool: asyncpg.Pool) -> int:
    """A window length whose current window (counted from the epoch) ends an hour or more from now."""
    now_ms = int(await pool.fetchval("SELECT floor(extract(epoch FROM now()) * 1000)"))
    for window_ms in (86_400_000, 86_400_000 - 7_200_000):
        if window_ms - now_ms % window_ms >= 3_600_000:
            return window_ms
    raise AssertionError("unreachable: two windows 2 h apart cannot both end within the hour")
