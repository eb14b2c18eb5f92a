"""`Database`: the one object through which a process reaches PostgreSQL.

It owns the pool, opens dedicated connections (`connect`: advisory-lock holders, one-off CLI work)
and the process's one LISTEN connection (`listener`), which every NOTIFY user subscribes to. The
connection string stays inside: components get a `Database`, never a DSN.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import asyncpg

from paymanager.db.listener import Listener
from paymanager.db.pool import Pool, connect, create_pool

if TYPE_CHECKING:
    from paymanager.config import Settings


class Database:
    def __init__(
        self, dsn: str, pool: Pool, *, application_name: str = "paymanager", owns_pool: bool = False
    ):
        """A Database over an open `pool` of `dsn`; `owns_pool`: `close` closes the pool too."""
        self._dsn = dsn
        self._pool = pool
        self._application_name = application_name
        self._owns_pool = owns_pool
        self.listener = Listener(self._listen_connection)

    @classmethod
    async def open(
        cls,
        dsn: str,
        *,
        min_size: int = 2,
        max_size: int = 10,
        statement_timeout_ms: int = 30_000,
        application_name: str = "paymanager",
    ) -> Database:
        """A Database with a pool of its own (closed by `close`)."""
        pool = await create_pool(
            dsn, min_size=min_size, max_size=max_size, statement_timeout_ms=statement_timeout_ms,
            application_name=application_name,
        )  # fmt: skip
        return cls(dsn, pool, application_name=application_name, owns_pool=True)

    @property
    def pool(self) -> Pool:
        return self._pool

    async def open_pool(self, *, max_size: int, statement_timeout_ms: int, application_name: str) -> Pool:
        """Another pool of this database (the caller closes it)."""
        return await create_pool(
            self._dsn, min_size=0, max_size=max_size, statement_timeout_ms=statement_timeout_ms,
            application_name=application_name,
        )  # fmt: skip

    async def connect(self, *, application_name: str | None = None) -> asyncpg.Connection:
        """A dedicated connection with our codecs; the caller closes it."""
        return await connect(self._dsn, application_name=application_name or self._application_name)

    async def _listen_connection(self) -> asyncpg.Connection:
        return await connect(self._dsn, application_name=f"{self._application_name}:listen")

    async def close(self) -> None:
        """Close the LISTEN connection, and the pool when this Database opened it."""
        await self.listener.close()
        if self._owns_pool:
            await self._pool.close()


def over_pool(pool: Pool, source: Database | str) -> Database:
    """`source` itself, or a Database over `pool` for a DSN: for a caller that runs the job engine on
    its own (tests, benchmarks) and has a pool and a connection string rather than a Database."""
    if isinstance(source, Database):
        return source
    return Database(source, pool)


def listener_of(source: Database | str) -> Listener:
    """The Database's LISTEN connection, or one of its own for a DSN (a subscriber outside a process
    that has a Database: tests, scripts)."""
    if isinstance(source, Database):
        return source.listener
    return Listener(lambda: connect(source, application_name="paymanager:listen"))


class NoDatabaseError(ValueError):
    """A command found neither DATABASE_URL nor an embedded database where it looked."""


def database_url(settings: Settings, *, create_embedded: bool = True) -> str:
    """`DATABASE_URL`, or the embedded PostgreSQL of the default set-up. `create_embedded=False`
    refuses, naming the directory, when there is no embedded database there yet: a command run in
    another directory must not quietly create an empty database and report on it."""
    if settings.database_url is not None:
        return settings.database_url.get_secret_value()
    from paymanager.db.embedded import start_embedded

    data_dir = Path(settings.embedded_pg_dir).resolve()
    if not create_embedded and not data_dir.exists():
        raise NoDatabaseError(
            f"DATABASE_URL is unset and there is no embedded database in {data_dir}: run the command "
            "where `paymanager run` keeps its data, or set EMBEDDED_PG_DIR or DATABASE_URL"
        )
    return start_embedded(settings.embedded_pg_dir)


async def open_database(
    settings: Settings,
    *,
    application_name: str,
    min_size: int | None = None,
    max_size: int | None = None,
    create_embedded: bool = True,
) -> Database:
    """The Database of `settings` (the pool sized by them unless given): what the runtime and every
    CLI command open."""
    return await Database.open(
        database_url(settings, create_embedded=create_embedded),
        min_size=settings.db_pool_min_size if min_size is None else min_size,
        max_size=settings.db_pool_max_size if max_size is None else max_size,
        statement_timeout_ms=settings.db_statement_timeout_ms,
        application_name=application_name,
    )


@contextlib.asynccontextmanager
async def opened(
    settings: Settings, *, application_name: str, max_size: int = 2, create_embedded: bool = False
) -> AsyncIterator[Database]:
    """A small Database for one command, closed on the way out. Only `paymanager migrate` creates an
    embedded database (`create_embedded`); other commands refuse where there is none."""
    database = await open_database(
        settings, application_name=application_name, min_size=1, max_size=max_size,
        create_embedded=create_embedded,
    )  # fmt: skip
    try:
        yield database
    finally:
        await database.close()
