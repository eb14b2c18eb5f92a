from __future__ import annotations

import asyncpg
import pytest

from paymanager.jobs import JobState
from paymanager.jobs._queries import Q


async def test_state_enum_matches_the_database(conn: asyncpg.Connection) -> None:
    rows = await conn.fetch(Q["job_state_enum"])
    assert [r["state"] for r in rows] == [s.value for s in JobState]


async def test_every_named_statement_prepares(conn: asyncpg.Connection) -> None:
    # A typo in any statement fails here, not at the first use in production.
    for name, statement in Q.items():
        await conn.prepare(statement), name


async def test_schema_refuses_a_bad_queue_or_kind_name_on_insert_and_update(conn: asyncpg.Connection) -> None:
    # The names are checked by domains (migration 0101), not by CHECKs re-run on every state change.
    insert = "INSERT INTO job (queue, kind, state, payload) VALUES ($1, $2, 'available', '{}') RETURNING id"
    for queue, kind in (("bad queue!", "k"), ("q", "bad kind!"), ("", "k"), ("q" * 65, "k")):
        with pytest.raises(asyncpg.CheckViolationError):
            await conn.fetchval(insert, queue, kind)
    job_id = await conn.fetchval(insert, "q", "k")
    with pytest.raises(asyncpg.CheckViolationError):
        await conn.execute("UPDATE job SET queue = 'no spaces' WHERE id = $1", job_id)
    with pytest.raises(asyncpg.CheckViolationError):
        await conn.execute("UPDATE job SET kind = 'k' || repeat('x', 128) WHERE id = $1", job_id)
    await conn.execute("UPDATE job SET state = 'cancelled', finalized_at = now() WHERE id = $1", job_id)
    assert await conn.fetchval("SELECT queue || '/' || kind FROM job WHERE id = $1", job_id) == "q/k"
