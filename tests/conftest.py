"""Shared fixtures: real PostgreSQL and Redis, a fresh migrated database per test."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest
import redis.asyncio as aioredis

from paymanager.db.pool import create_pool
from tests.support.databases import DatabaseFactory, find_server, run_sync
from tests.support.examples import load_scaled_profile
from tests.support.tigerbeetle_server import TigerBeetleCluster, find_binary

REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/0")

load_scaled_profile()


@pytest.fixture(scope="session")
def pg_server_url() -> str:
    return find_server()


@pytest.fixture(scope="session")
def database_factory(pg_server_url: str) -> Iterator[DatabaseFactory]:
    factory = DatabaseFactory(pg_server_url)
    yield factory
    run_sync(factory.drop_all())


@pytest.fixture
def database_url(database_factory: DatabaseFactory) -> Iterator[str]:
    """URL of a fresh database with every migration applied, dropped after the test."""
    url = run_sync(database_factory.create())
    yield url
    run_sync(database_factory.drop(url))


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await create_pool(database_url, min_size=1, max_size=8)
    yield pool
    await pool.close()


@pytest.fixture
async def conn(pool: asyncpg.Pool) -> AsyncIterator[asyncpg.Connection]:
    async with pool.acquire() as connection:
        yield connection


@pytest.fixture(scope="session")
def redis_url() -> str:
    """Redis at TEST_REDIS_URL (default 127.0.0.1:6379). Absent: skip locally, FAIL in CI."""

    async def ping() -> bool:
        client = aioredis.from_url(REDIS_URL, socket_connect_timeout=2)
        try:
            return bool(await client.ping())
        except (OSError, aioredis.RedisError):
            return False
        finally:
            await client.aclose()

    if not run_sync(ping()):
        message = f"Redis is not reachable at {REDIS_URL}"
        if os.environ.get("CI"):
            pytest.fail(message + " (CI must provide it)")
        pytest.skip(message)
    return REDIS_URL


@pytest.fixture(scope="session")
def tigerbeetle_address() -> Iterator[str]:
    """TB_ADDRESS of a TigerBeetle replica of this test process (started on first use, stopped at the
    end), or of the cluster TEST_TB_ADDRESS names. No binary: skip locally, FAIL in CI.

    A `--development` replica without `--limit-request`: 1.4 GiB rather than 1.8, and requests of at
    most 253 events, so every larger batch of the tests goes through the adapter's splitting."""
    external = os.environ.get("TEST_TB_ADDRESS")
    if external:
        yield external
        return
    binary = find_binary()
    if binary is None:
        message = "no tigerbeetle binary (TIGERBEETLE_BIN, PATH or ../shared/bin/tigerbeetle)"
        if os.environ.get("CI"):
            pytest.fail(message + " (CI must provide it)")
        pytest.skip(message)
    cluster = TigerBeetleCluster(binary, full_batches=False)
    try:
        yield cluster.address
    finally:
        cluster.close()
