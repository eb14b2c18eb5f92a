"""Test databases: one migrated template per xdist worker, cloned per test (procrastinate's way).

The server is `TEST_DATABASE_URL`, else 127.0.0.1:5432 when it answers, else an embedded PostgreSQL in
a temporary directory. Database names carry the run's id and the worker's, so several test runs (and
several developers' runs) can share one server.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import os
import tempfile
import uuid
from collections.abc import Coroutine
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from paymanager.db import migrations

T = TypeVar("T")

LOCAL_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion on a private loop, whatever loop the caller's thread has."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + database, parts.query, parts.fragment))


async def _answers(url: str) -> bool:
    try:
        conn = await asyncpg.connect(url, timeout=2)
    except (OSError, asyncpg.PostgresError, TimeoutError):
        return False
    await conn.close()
    return True


def find_server() -> str:
    explicit = os.environ.get("TEST_DATABASE_URL")
    if explicit:
        return explicit
    if run_sync(_answers(LOCAL_SERVER)):
        return LOCAL_SERVER
    from paymanager.db.embedded import start_embedded

    return start_embedded(os.path.join(tempfile.mkdtemp(prefix="pm-test-pg-"), "pg"))


class DatabaseFactory:
    """Creates and drops the databases of one test worker."""

    def __init__(self, server_url: str) -> None:
        self.server_url = server_url
        run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID", uuid.uuid4().hex)[:8]
        worker = os.environ.get("PYTEST_XDIST_WORKER", "gw")
        self.prefix = f"pmt_{run_id}_{worker}"
        self.template = f"{self.prefix}_tpl"
        self._counter = itertools.count(1)
        self._template_ready = False

    async def _admin(self) -> asyncpg.Connection:
        return await asyncpg.connect(self.server_url)

    async def _ensure_template(self) -> None:
        if self._template_ready:
            return
        admin = await self._admin()
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{self.template}" WITH (FORCE)')
            await admin.execute(f'CREATE DATABASE "{self.template}"')
        finally:
            await admin.close()
        conn = await asyncpg.connect(with_database(self.server_url, self.template))
        try:
            await migrations.migrate(conn)
        finally:
            await conn.close()
        self._template_ready = True

    async def create(self) -> str:
        """A fresh, migrated database; returns its URL."""
        await self._ensure_template()
        name = f"{self.prefix}_{next(self._counter)}"
        admin = await self._admin()
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
        finally:
            await admin.close()
        return with_database(self.server_url, name)

    async def create_empty(self) -> str:
        """A database with no schema at all (for migration tests)."""
        name = f"{self.prefix}_{next(self._counter)}"
        admin = await self._admin()
        try:
            await admin.execute(f'CREATE DATABASE "{name}"')
        finally:
            await admin.close()
        return with_database(self.server_url, name)

    async def drop(self, url: str) -> None:
        name = urlsplit(url).path.lstrip("/")
        assert name.startswith(self.prefix), name
        admin = await self._admin()
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()

    async def drop_all(self) -> None:
        admin = await self._admin()
        try:
            names = await admin.fetch(
                "SELECT datname FROM pg_database WHERE datname LIKE $1", self.prefix + "\\_%"
            )
            for row in names:
                await admin.execute(f'DROP DATABASE IF EXISTS "{row["datname"]}" WITH (FORCE)')
        finally:
            await admin.close()
