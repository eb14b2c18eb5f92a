from __future__ import annotations

from paymanager.db.pool import create_pool
from paymanager.jobs._pinned import PinnedConnection

MODE = "SELECT current_setting('plan_cache_mode') AS mode"


async def test_pinned_connection_plans_generically_and_gives_the_setting_back(database_url: str) -> None:
    # One connection in the pool, so the connection checked after release is the pinned one.
    pool = await create_pool(database_url, min_size=1, max_size=1)
    try:
        pinned = PinnedConnection(pool, generic_plans=True)
        assert (await pinned.fetch(MODE))[0]["mode"] == "force_generic_plan"
        await pinned.close()
        assert await pool.fetchval(MODE) == "auto"
        plain = PinnedConnection(pool)
        assert (await plain.fetch(MODE))[0]["mode"] == "auto"
        await plain.close()
    finally:
        await pool.close()
