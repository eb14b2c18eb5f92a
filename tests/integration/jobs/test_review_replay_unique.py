"""Review finding: replaying dead jobs that carry a unique key another job holds now."""

from __future__ import annotations

from paymanager.db.pool import Conn
from paymanager.jobs import admin, enqueue

KIND = "intent.settle"


async def _dead(conn: Conn, unique_key: str | None) -> int:
    """A job that died (its unique key, if any, is free again once it is dead)."""
    result = await enqueue(conn, KIND, {"n": 1}, unique_key=unique_key)
    assert result.created
    await conn.execute("UPDATE job SET state = 'dead', finalized_at = now() WHERE id = $1", result.id)
    return result.id


async def test_replaying_dead_jobs_skips_one_whose_unique_key_a_live_job_holds(conn: Conn) -> None:
    # The settlement job of an intent died; the reconciler enqueued a new one under the same unique
    # key. An operator replays the dead jobs of the kind: the others must come back, and the one
    # whose work is already queued again stays dead (two live jobs cannot share the key).
    held = await _dead(conn, "intent.settle:a")
    live = await enqueue(conn, KIND, {"n": 2}, unique_key="intent.settle:a")
    assert live.created
    free = await _dead(conn, "intent.settle:b")
    plain = await _dead(conn, None)
    replayed = await admin.replay_dead(conn, kind=KIND)
    assert sorted(replayed) == sorted([free, plain])
    assert await conn.fetchval("SELECT state::text FROM job WHERE id = $1", held) == "dead"


async def test_replaying_two_dead_jobs_with_one_unique_key_brings_back_one(conn: Conn) -> None:
    older = await _dead(conn, "intent.settle:c")
    newer = await _dead(conn, "intent.settle:c")
    assert await admin.replay_dead(conn, kind=KIND) == [newer]
    assert await conn.fetchval("SELECT state::text FROM job WHERE id = $1", older) == "dead"


async def test_retrying_a_dead_job_whose_unique_key_a_live_job_holds_is_refused_not_an_error(
    conn: Conn,
) -> None:
    held = await _dead(conn, "intent.settle:d")
    assert (await enqueue(conn, KIND, {"n": 2}, unique_key="intent.settle:d")).created
    assert await admin.retry_job(conn, held) is False
    assert await conn.fetchval("SELECT state::text FROM job WHERE id = $1", held) == "dead"
