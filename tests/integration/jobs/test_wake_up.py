"""The enqueue statements wake their queues' workers themselves (migration 0102 removed the insert
trigger): one NOTIFY per queue and transaction, at commit, and only for jobs that are available."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from paymanager.db.notices import Notices
from paymanager.db.pool import connect
from paymanager.jobs import NewJob, enqueue, enqueue_flow, enqueue_many
from paymanager.jobs._queries import CHANNEL_AVAILABLE
from tests.integration.jobs.conftest import wait_until

# Sent last by the test itself: notifications reach a listener in commit order, so once the
# sentinel has arrived every notification committed before it has too.
SENTINEL = "sentinel"


class Heard:
    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn
        self.queues: list[str] = []

    async def after_commit(self, pool: asyncpg.Pool) -> list[str]:
        """The queues woken by everything committed so far (the sentinel left out), then forget them."""
        await pool.execute("SELECT pg_notify($1, $2)", CHANNEL_AVAILABLE, SENTINEL)

        async def sentinel_heard() -> bool:
            return SENTINEL in self.queues

        await wait_until(sentinel_heard)
        heard, self.queues = [q for q in self.queues if q != SENTINEL], []
        return heard


@pytest.fixture
async def heard(database_url: str) -> AsyncIterator[Heard]:
    conn = await connect(database_url)
    result = Heard(conn)
    await conn.add_listener(CHANNEL_AVAILABLE, lambda _c, _p, _ch, payload: result.queues.append(payload))
    yield result
    await conn.close()


async def test_an_enqueue_wakes_its_queue_once_per_transaction_and_only_at_commit(
    pool: asyncpg.Pool, heard: Heard
) -> None:
    async with pool.acquire() as conn, conn.transaction():
        await enqueue(conn, "k", {}, queue="a")
        await enqueue(conn, "k", {}, queue="a")
        await enqueue(conn, "k", {}, queue="b")
        # Everything committed so far has been heard once the sentinel has: a wake-up sent outside
        # this transaction would be among it.
        assert await heard.after_commit(pool) == [], "a NOTIFY went out before the enqueue committed"
    assert sorted(await heard.after_commit(pool)) == ["a", "b"]


async def test_a_rolled_back_enqueue_wakes_nobody(pool: asyncpg.Pool, heard: Heard) -> None:
    async with pool.acquire() as conn:
        transaction = conn.transaction()
        await transaction.start()
        await enqueue(conn, "k", {}, queue="a")
        await enqueue_many(conn, [NewJob("k", {}, queue="b")])
        await transaction.rollback()
    assert await heard.after_commit(pool) == []


async def test_jobs_that_are_not_available_wake_nobody(pool: asyncpg.Pool, heard: Heard) -> None:
    later = datetime.now(UTC) + timedelta(hours=1)
    await enqueue(pool, "k", {}, queue="scheduled", run_at=later)
    await enqueue(pool, "k", {}, queue="delayed", delay_ms=60_000)
    await enqueue_many(pool, [NewJob("k", {}, queue="scheduled", run_at=later)])
    # A flow's parent waits for its children; only the children's queue is woken.
    await enqueue_flow(pool, NewJob("parent", {}, queue="parents"), [NewJob("child", {}, queue="children")])
    assert await heard.after_commit(pool) == ["children"]


async def test_an_enqueue_that_returns_the_holder_of_its_unique_key_wakes_nobody(
    pool: asyncpg.Pool, heard: Heard
) -> None:
    first = await enqueue(pool, "k", {}, queue="a", unique_key="once")
    assert await heard.after_commit(pool) == ["a"]
    again = await enqueue(pool, "k", {}, queue="a", unique_key="once")
    assert (again.id, again.created) == (first.id, False)
    assert await heard.after_commit(pool) == []


async def test_enqueue_many_wakes_each_queue_with_an_available_job_once(
    pool: asyncpg.Pool, heard: Heard
) -> None:
    later = datetime.now(UTC) + timedelta(hours=1)
    jobs = [NewJob("k", {"i": i}, queue=("a", "b")[i % 2]) for i in range(50)]
    jobs.append(NewJob("k", {}, queue="c", run_at=later))
    ids = await enqueue_many(pool, jobs)
    assert sorted(await heard.after_commit(pool)) == ["a", "b"]
    # The ids still come back in the order of the input.
    rows = await pool.fetch("SELECT id, payload FROM job WHERE id = ANY($1::bigint[])", ids)
    by_id = {row["id"]: row["payload"] for row in rows}
    assert [by_id[i].get("i") for i in ids[:-1]] == list(range(50))


async def test_an_enqueue_without_notify_leaves_the_wake_up_to_its_caller(
    pool: asyncpg.Pool, heard: Heard
) -> None:
    """`notify=False` keeps the NOTIFY (and PostgreSQL's NOTIFY lock) out of the caller's commit; the
    caller's post-commit `Notices` wakes the queue instead (db/notices.py)."""
    async with pool.acquire() as conn, conn.transaction():
        await enqueue(conn, "k", {}, queue="quiet", notify=False)
    assert await heard.after_commit(pool) == []
    notices = Notices(pool)
    notices.send(CHANNEL_AVAILABLE, ["quiet"])
    await notices.flush()
    assert await heard.after_commit(pool) == ["quiet"]


async def test_notices_queued_while_one_is_sent_all_arrive_in_order(pool: asyncpg.Pool, heard: Heard) -> None:
    notices = Notices(pool)
    for queue in ("a", "b", "c"):
        notices.send(CHANNEL_AVAILABLE, [queue])
    notices.send(CHANNEL_AVAILABLE, [])
    await notices.flush()
    assert await heard.after_commit(pool) == ["a", "b", "c"]


async def test_notices_that_cannot_be_sent_are_logged_not_raised(database_url: str) -> None:
    closed = await asyncpg.create_pool(database_url, min_size=0, max_size=1)
    await closed.close()
    notices = Notices(closed)
    notices.send(CHANNEL_AVAILABLE, ["lost"])
    await notices.flush()  # a lost notice costs its listener a poll interval, never the caller
