from __future__ import annotations

import asyncpg

from paymanager.jobs import JobState
from paymanager.jobs._queries import Q


async def test_state_enum_matches_the_database(conn: asyncpg.Connection) -> None:
    rows = await conn.fetch(Q["job_state_enum"])
    assert [r["state"] for r in rows] == [s.value for s in JobState]


async def test_every_named_statement_prepares(conn: asyncpg.Connection) -> None:
    # A typo in any statement fails here, not at the first use in production.
    for name, statement in Q.items():
        await conn.prepare(statement), name
