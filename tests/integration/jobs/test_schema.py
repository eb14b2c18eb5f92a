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


# Each one-column rule of the job table (domains since migration 0103): a value at each edge that is
# accepted, and one just past it that is refused, by an INSERT and by an UPDATE of that column.
COLUMN_RULES = [
    ("priority", "-1000", "-1001"),
    ("priority", "1000", "1001"),
    ("attempt", "0", "-1"),
    ("pending_children", "0", "-1"),
    ("stalled_count", "0", "-1"),
    ("max_attempts", "1", "0"),
    ("max_attempts", "1000", "1001"),
    ("timeout_ms", "1", "0"),
    ("timeout_ms", "86400000", "86400001"),
    ("unique_key", "repeat('u', 512)", "''"),
    ("unique_key", "'u'", "repeat('u', 513)"),
    ("on_child_dead", "'ignore'", "'sometimes'"),
    ("progress", "100", "100.5"),
    ("progress", "0", "-0.5"),
    ("payload", "'{}'::jsonb", "jsonb_build_object('x', repeat('p', 16777216))"),
]


def insert_with(column: str, value: str) -> str:
    row = {"queue": "'q'", "kind": "'k'", "state": "'scheduled'", "payload": "'{}'", column: value}
    return f"INSERT INTO job ({', '.join(row)}) VALUES ({', '.join(row.values())}) RETURNING id"


@pytest.mark.parametrize(("column", "good", "bad"), COLUMN_RULES)
async def test_schema_refuses_a_value_out_of_its_columns_range(
    conn: asyncpg.Connection, column: str, good: str, bad: str
) -> None:
    with pytest.raises(asyncpg.CheckViolationError):
        await conn.fetchval(insert_with(column, bad))
    job_id = await conn.fetchval(insert_with(column, good))
    with pytest.raises(asyncpg.CheckViolationError):
        await conn.execute(f"UPDATE job SET {column} = {bad} WHERE id = $1", job_id)
    await conn.execute(f"UPDATE job SET {column} = {good} WHERE id = $1", job_id)


async def test_only_the_rules_that_relate_two_columns_stay_checks_on_the_job_table(
    conn: asyncpg.Connection,
) -> None:
    # PostgreSQL sets up every CHECK of a table at the start of each INSERT and UPDATE statement.
    rows = await conn.fetch(
        "SELECT conname FROM pg_constraint WHERE conrelid = 'job'::regclass AND contype = 'c'"
    )
    assert sorted(r["conname"] for r in rows) == [
        "job_attempt_within_max", "job_finalized_iff_terminal", "job_lease_iff_running",
    ]  # fmt: skip


async def test_a_completed_job_is_in_no_index_but_the_primary_key(conn: asyncpg.Connection) -> None:
    # Each state change writes a new row version into every index whose predicate it meets, so an
    # index that admits completed jobs costs every completion an entry (the pruner walks the
    # primary key instead). A dead job stays findable by queue and finish time.
    job_id = await conn.fetchval(
        "INSERT INTO job (queue, kind, payload, state, finalized_at)"
        " VALUES ('q', 'k', '{}', 'completed', now()) RETURNING id"
    )
    dead_id = await conn.fetchval(
        "INSERT INTO job (queue, kind, payload, state, finalized_at)"
        " VALUES ('q', 'k', '{}', 'dead', now()) RETURNING id"
    )

    async def indexes_holding(row_id: int) -> list[str]:
        held = []
        for index in await conn.fetch(
            "SELECT indexrelid::regclass::text AS name, pg_get_expr(indpred, indrelid) AS predicate"
            "  FROM pg_index WHERE indrelid = 'job'::regclass"
        ):
            predicate = index["predicate"] or "true"
            if await conn.fetchval(
                f"SELECT EXISTS (SELECT 1 FROM job WHERE id = $1 AND ({predicate}))", row_id
            ):
                held.append(index["name"])
        return sorted(held)

    assert await indexes_holding(job_id) == ["job_pkey"]
    assert await indexes_holding(dead_id) == ["job_failed_idx", "job_pkey"]
