from __future__ import annotations

import asyncpg


async def test_a_connection_returned_inside_a_transaction_comes_back_clean(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        await conn.execute("BEGIN")
        await conn.execute("CREATE TEMP TABLE leftover (x int) ON COMMIT DROP")
        assert conn.is_in_transaction()
    # The pool has at most 8 connections: borrow each of them and check none kept the transaction.
    conns = [await pool.acquire() for _ in range(pool.get_size())]
    try:
        for conn in conns:
            assert not conn.is_in_transaction()
            assert await conn.fetchval("SELECT to_regclass('pg_temp.leftover')") is None
    finally:
        for conn in conns:
            await pool.release(conn)


async def test_pooled_connections_decode_json_and_carry_the_statement_timeout(pool: asyncpg.Pool) -> None:
    assert await pool.fetchval("SELECT '{\"a\": [1, 2]}'::jsonb") == {"a": [1, 2]}
    assert await pool.fetchval("SHOW statement_timeout") == "30s"
