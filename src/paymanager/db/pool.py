"""The project's one PostgreSQL driver and pool: asyncpg.

asyncpg was chosen over psycopg 3 by measurement (`bench/driver.py` compares them): the job
engine's claim/complete round trips and the ledger's batch statements are faster on it.
JSON and JSONB columns are decoded with orjson into Python objects on every pooled connection.
"""

from __future__ import annotations

from typing import Any, TypeAlias

import asyncpg
import orjson
from asyncpg.pool import PoolConnectionProxy

Pool: TypeAlias = "asyncpg.Pool[asyncpg.Record]"
# What our functions accept as "a connection": a dedicated one or one borrowed from a pool.
Conn: TypeAlias = "asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]"


def _json_encode(value: Any) -> str:
    return orjson.dumps(value).decode()


async def init_connection(conn: Conn) -> None:
    """Codecs every connection of ours uses (pooled or dedicated, such as a LISTEN connection)."""
    await conn.set_type_codec("jsonb", encoder=_json_encode, decoder=orjson.loads, schema="pg_catalog")
    await conn.set_type_codec("json", encoder=_json_encode, decoder=orjson.loads, schema="pg_catalog")


async def reset_connection(conn: Conn) -> None:
    """What a connection needs on its way back to the pool: no open transaction, nothing more.

    asyncpg's default reset runs `pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL` on every
    release: a round trip per borrow, as long as a short pooled call itself. Our pooled
    connections never hold session state (LISTEN, session advisory locks and SETs use dedicated
    connections from `connect`), so only a transaction left open by a cancelled task needs undoing.
    """
    if conn.is_in_transaction():
        await conn.execute("ROLLBACK")


async def create_pool(
    dsn: str,
    *,
    min_size: int = 2,
    max_size: int = 10,
    statement_timeout_ms: int = 30_000,
    application_name: str = "paymanager",
) -> asyncpg.Pool:
    """Open a pool whose connections carry our codecs, a statement timeout and an application name."""
    pool = await asyncpg.create_pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        init=init_connection,
        reset=reset_connection,
        server_settings={
            "application_name": application_name,
            "statement_timeout": str(statement_timeout_ms),
        },
    )
    assert pool is not None
    return pool


async def connect(dsn: str, *, application_name: str = "paymanager") -> asyncpg.Connection:
    """A dedicated connection (LISTEN, advisory-lock holders, CLI one-offs) with the same codecs."""
    conn = await asyncpg.connect(dsn, server_settings={"application_name": application_name})
    await init_connection(conn)
    return conn
