from __future__ import annotations

import re

from paymanager.db.pool import create_pool
from paymanager.jobs._pinned import PinnedConnection
from paymanager.jobs._queries import Q
from tests.support.pinned_sessions import DEFAULT, LOCK_TIMEOUT, PLANNED, SETTINGS


async def test_pinned_connection_plans_generically_by_index_and_gives_the_settings_back(
    database_url: str,
) -> None:
    # One connection in the pool, so the connection checked after release is the pinned one.
    pool = await create_pool(database_url, min_size=1, max_size=1)
    pinned = PinnedConnection(pool, generic_plans=True)
    try:
        try:
            assert dict((await pinned.fetch(SETTINGS))[0]) == PLANNED
        finally:
            await pinned.close()
        assert dict(await pool.fetchrow(SETTINGS)) == DEFAULT
        plain = PinnedConnection(pool)
        assert dict((await plain.fetch(SETTINGS))[0]) == DEFAULT
        await plain.close()
    finally:
        await pool.close()


async def test_a_claim_session_waits_at_most_its_lock_timeout_and_gives_the_setting_back(
    database_url: str,
) -> None:
    pool = await create_pool(database_url, min_size=1, max_size=1)
    claims = PinnedConnection(pool, generic_plans=True, lock_timeout_ms=1_500)
    try:
        try:
            assert dict((await claims.fetch(LOCK_TIMEOUT))[0]) == {"lock_timeout": "1500ms"}
        finally:
            await claims.close()
        assert dict(await pool.fetchrow(LOCK_TIMEOUT)) == {"lock_timeout": "0"}
    finally:
        await pool.close()


# The statements the worker runs on its pinned connections (claims and completions).
PINNED_STATEMENTS = (
    "job_claim", "job_claim_queue", "job_claim_batch", "job_claim_batch_deleting", "job_complete_many",
    "job_complete_many_deleting",
    "job_fail_many",
)  # fmt: skip


async def test_pinned_statements_read_the_job_table_by_index_whatever_its_size(database_url: str) -> None:
    # A generic plan made while the table is small would scan it whole (or by bitmap) for
    # `id = ANY(...)` and keep doing so as it grows; a test database's table is small.
    pool = await create_pool(database_url, min_size=1, max_size=1)
    pinned = PinnedConnection(pool, generic_plans=True)
    try:
        for name in PINNED_STATEMENTS:
            statement = Q[name]
            params = max(int(n) for n in re.findall(r"\$(\d+)", statement))
            await pinned.fetch(f"PREPARE pinned_plan AS {statement}")
            rows = await pinned.fetch(f"EXPLAIN EXECUTE pinned_plan({', '.join(['NULL'] * params)})")
            await pinned.fetch("DEALLOCATE pinned_plan")
            plan = "\n".join(row[0] for row in rows)
            assert "Index Scan using job_pkey" in plan, plan
            assert not re.search(r"(Seq Scan|Bitmap Heap Scan) on job\b", plan), f"{name}:\n{plan}"
    finally:
        await pinned.close()
        await pool.close()
