"""Which async PostgreSQL driver: asyncpg or psycopg 3? Measured on the statements our engine runs.

Run: `make bench-driver` (or `.venv/bin/python bench/driver.py`; needs the `bench` extra for psycopg).

Each workload runs against the same server in the same run, driver after driver, repeated, and the
best of the repeats is printed with the ratio asyncpg / psycopg (higher is better for asyncpg):
- `round trip`: one small parameterised query per call (the shape of a claim with one free slot);
- `claim 50`: `WITH ... FOR UPDATE SKIP LOCKED ... UPDATE ... RETURNING` of 50 rows, then putting
  them back (the engine's batch claim);
- `insert 1000`: one multi-row insert of 1,000 rows through unnest() (bulk enqueue);
- `fetch 1000`: decoding 1,000 rows of (bigint, text, jsonb, timestamptz).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import orjson

DEFAULT_DSN = os.environ.get("BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")

SETUP = """
DROP TABLE IF EXISTS bench_driver;
CREATE TABLE bench_driver (
    id bigserial PRIMARY KEY,
    state text NOT NULL DEFAULT 'available',
    kind text NOT NULL,
    payload jsonb NOT NULL,
    run_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO bench_driver (kind, payload)
SELECT 'noop', jsonb_build_object('n', g) FROM generate_series(1, 5000) g;
CREATE INDEX ON bench_driver (state, run_at);
"""

CLAIM = """
WITH picked AS (
    SELECT id FROM bench_driver WHERE state = 'available' ORDER BY run_at, id
    LIMIT $1 FOR UPDATE SKIP LOCKED
)
UPDATE bench_driver b SET state = 'running' FROM picked WHERE b.id = picked.id
RETURNING b.id, b.kind, b.payload
"""
RELEASE = "UPDATE bench_driver SET state = 'available' WHERE id = ANY($1::bigint[])"
INSERT = "INSERT INTO bench_driver (kind, payload) SELECT 'noop', p FROM unnest($1::jsonb[]) AS p"
FETCH = "SELECT id, kind, payload, run_at FROM bench_driver ORDER BY id LIMIT 1000"

PSYCOPG_CLAIM = CLAIM.replace("$1", "%s")
PSYCOPG_RELEASE = RELEASE.replace("$1", "%s")
PSYCOPG_INSERT = INSERT.replace("$1", "%s")


async def timed(label: str, count: int, body: Callable[[], Awaitable[None]], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        await body()
        best = min(best, time.perf_counter() - started)
    del label
    return count / best


async def bench_asyncpg(dsn: str, n: int, repeats: int) -> dict[str, float]:
    conn = await asyncpg.connect(dsn)
    await conn.set_type_codec(
        "jsonb", encoder=lambda v: orjson.dumps(v).decode(), decoder=orjson.loads, schema="pg_catalog"
    )
    payloads = [{"n": i} for i in range(1000)]

    async def round_trips() -> None:
        for i in range(n):
            await conn.fetchval("SELECT $1::bigint + 1", i)

    async def claims() -> None:
        for _ in range(n // 10):
            async with conn.transaction():
                rows = await conn.fetch(CLAIM, 50)
                await conn.execute(RELEASE, [r["id"] for r in rows])

    async def inserts() -> None:
        for _ in range(10):
            await conn.execute(INSERT, payloads)

    async def fetches() -> None:
        for _ in range(20):
            await conn.fetch(FETCH)

    results = {
        "round trip (calls/s)": await timed("rt", n, round_trips, repeats),
        "claim 50 + release (batches/s)": await timed("claim", n // 10, claims, repeats),
        "insert 1000 (rows/s)": await timed("insert", 10_000, inserts, repeats),
        "fetch 1000 (rows/s)": await timed("fetch", 20_000, fetches, repeats),
    }
    await conn.close()
    return results


async def bench_psycopg(dsn: str, n: int, repeats: int) -> dict[str, float]:
    import psycopg
    from psycopg.types.json import Jsonb, set_json_dumps, set_json_loads

    set_json_dumps(lambda v: orjson.dumps(v).decode())
    set_json_loads(orjson.loads)
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True, prepare_threshold=0)
    payloads: list[Any] = [Jsonb({"n": i}) for i in range(1000)]

    async def round_trips() -> None:
        async with conn.cursor() as cur:
            for i in range(n):
                await cur.execute("SELECT %s::bigint + 1", (i,))
                await cur.fetchone()

    async def claims() -> None:
        for _ in range(n // 10):
            async with conn.transaction(), conn.cursor() as cur:
                await cur.execute(PSYCOPG_CLAIM, (50,))
                rows = await cur.fetchall()
                await cur.execute(PSYCOPG_RELEASE, ([r[0] for r in rows],))

    async def inserts() -> None:
        async with conn.cursor() as cur:
            for _ in range(10):
                await cur.execute(PSYCOPG_INSERT, (payloads,))

    async def fetches() -> None:
        async with conn.cursor() as cur:
            for _ in range(20):
                await cur.execute(FETCH)
                await cur.fetchall()

    results = {
        "round trip (calls/s)": await timed("rt", n, round_trips, repeats),
        "claim 50 + release (batches/s)": await timed("claim", n // 10, claims, repeats),
        "insert 1000 (rows/s)": await timed("insert", 10_000, inserts, repeats),
        "fetch 1000 (rows/s)": await timed("fetch", 20_000, fetches, repeats),
    }
    await conn.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--calls", type=int, default=2000, help="round trips per repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop")
    args = parser.parse_args()
    print(f"event loop: {args.loop}")

    if args.loop == "uvloop":
        import uvloop

        uvloop.run(compare(args))
    else:
        asyncio.run(compare(args))


async def pool_resets(dsn: str, calls: int) -> None:
    """asyncpg's default reset on release against ours (db/pool.py: only a ROLLBACK when needed)."""
    from paymanager.db.pool import reset_connection

    best: dict[str, float] = {}
    for label, reset in [("default reset", None), ("paymanager reset", reset_connection)] * 2:
        pool = await asyncpg.create_pool(dsn, min_size=2, max_size=2, reset=reset)
        started = time.perf_counter()
        for i in range(calls):
            await pool.fetchval("SELECT $1::int", i)
        best[label] = max(best.get(label, 0.0), calls / (time.perf_counter() - started))
        await pool.close()
    ratio = best["paymanager reset"] / best["default reset"]
    print(
        f"pooled call, asyncpg default reset: {best['default reset']:,.0f}/s; "
        f"paymanager reset: {best['paymanager reset']:,.0f}/s ({ratio:.2f}x)"
    )


async def compare(args: argparse.Namespace) -> None:
    setup = await asyncpg.connect(args.dsn)
    await setup.execute(SETUP)
    await setup.close()
    try:
        # Interleave the drivers so that noise from the shared machine hits both alike.
        first = await bench_asyncpg(args.dsn, args.calls, args.repeats)
        second = await bench_psycopg(args.dsn, args.calls, args.repeats)
        third = await bench_asyncpg(args.dsn, args.calls, args.repeats)
        fourth = await bench_psycopg(args.dsn, args.calls, args.repeats)
    finally:
        cleanup = await asyncpg.connect(args.dsn)
        await cleanup.execute("DROP TABLE IF EXISTS bench_driver")
        await cleanup.close()
    await pool_resets(args.dsn, args.calls)
    print(f"{'workload':34} {'asyncpg':>12} {'psycopg 3':>12} {'ratio':>7}")
    for key in first:
        a = max(first[key], third[key])
        p = max(second[key], fourth[key])
        print(f"{key:34} {a:12,.0f} {p:12,.0f} {a / p:7.2f}x")


if __name__ == "__main__":
    main()
