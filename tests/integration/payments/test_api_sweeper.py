"""The api sweeper forgets what is past its window: expired signatures by their index, expired
Idempotency-Keys by walking the key table's pages (it has no index on expires_at), a bounded number
of pages per tick, starting over past the last; a live key is never forgotten."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import asyncpg

from paymanager.application.idempotency.store import Q
from paymanager.application.sweeper import ApiSweeper
from tests.integration.payments.conftest import build_components

KEYS = 1_200
PAGES_PER_TICK = 2


async def _keys(pool: asyncpg.Pool, every_other_expired: bool = True) -> dict[uuid.UUID, bool]:
    """KEYS keys over several pages, every other one past its TTL: {id: expired}."""
    now = await pool.fetchval("SELECT now()")
    rows = [(uuid.uuid4(), i % 2 == 1 and every_other_expired) for i in range(KEYS)]
    await pool.executemany(
        "INSERT INTO idempotency_key (id, expires_at, status_code, request_hash, response_body)"
        " VALUES ($1, $2, 201, '\\x0102030405060708', '{}')",
        [(key, now + (-timedelta(seconds=1) if expired else timedelta(days=1))) for key, expired in rows],
    )
    return dict(rows)


async def _pages_of(pool: asyncpg.Pool) -> dict[uuid.UUID, int]:
    rows = await pool.fetch("SELECT id, (ctid::text::point)[0]::bigint AS page FROM idempotency_key")
    return {row["id"]: row["page"] for row in rows}


async def test_a_tick_reads_its_pages_only_and_the_walk_covers_the_table(
    pool: asyncpg.Pool, database_url: str
) -> None:
    components = await build_components(pool, database_url, api_sweep_key_pages=PAGES_PER_TICK)
    keys = await _keys(pool)
    page = await _pages_of(pool)
    pages = max(page.values()) + 1
    assert pages > 3 * PAGES_PER_TICK, "the keys span several ticks' pages"
    sweeper = ApiSweeper(components.payments)

    deleted = await sweeper.sweep_once()
    left = set(await _pages_of(pool))
    expired_in_reach = {k for k, expired in keys.items() if expired and page[k] < PAGES_PER_TICK}
    assert deleted == len(expired_in_reach) > 0
    assert left == set(keys) - expired_in_reach

    for _ in range(pages):  # the rest of the walk, and a tick past its end
        await sweeper.sweep_once()
    assert set(await _pages_of(pool)) == {k for k, expired in keys.items() if not expired}


async def test_the_walk_starts_over_and_finds_keys_that_expired_behind_it(
    pool: asyncpg.Pool, database_url: str
) -> None:
    components = await build_components(pool, database_url, api_sweep_key_pages=10_000)
    keys = await _keys(pool, every_other_expired=False)
    sweeper = ApiSweeper(components.payments)
    assert await sweeper.sweep_once() == 0
    # Every key's TTL passes after the walk went by them: the next tick walks from the first page.
    await pool.execute("UPDATE idempotency_key SET expires_at = now() - interval '1 second'")
    assert await sweeper.sweep_once() == len(keys)
    assert await pool.fetchval("SELECT count(*) FROM idempotency_key") == 0


async def test_expired_signatures_are_forgotten_and_live_ones_kept(
    pool: asyncpg.Pool, database_url: str
) -> None:
    components = await build_components(pool, database_url)
    await pool.executemany(
        "INSERT INTO request_signature (signature, service_id, expires_at)"
        " VALUES ($1, 'svc_test', now() + $2)",
        [(bytes([i]) * 32, timedelta(seconds=-1) if i % 2 else timedelta(minutes=5)) for i in range(10)],
    )
    await ApiSweeper(components.payments).sweep_once()
    left = await pool.fetch("SELECT signature FROM request_signature")
    assert sorted(row["signature"][0] for row in left) == [0, 2, 4, 6, 8]


async def test_a_sweep_statement_reads_its_page_range_not_the_table(pool: asyncpg.Pool) -> None:
    await _keys(pool)
    await pool.execute("ANALYZE idempotency_key")
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        statement = await conn.prepare("EXPLAIN " + Q["idempotency_key_prune_pages"])
        plan = "\n".join(row[0] for row in await statement.fetch(datetime.now(UTC), 0, 2))
    assert "Tid Range Scan on idempotency_key" in plan
    assert "Seq Scan on idempotency_key" not in plan
