"""`paymanager storage`: history partitions ahead, and detaching a month for archiving."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

storage_app = typer.Typer(name="storage", help="History partitions and archiving.", no_args_is_help=True)


@storage_app.command("ensure-partitions")
def ensure_partitions_command() -> None:
    """Create the history partitions of this month and HISTORY_PARTITION_MONTHS_AHEAD months after it."""
    from paymanager.application.storage.upkeep import ensure_partitions, system_clock
    from paymanager.cli._command import load_settings
    from paymanager.db.database import opened

    settings = load_settings()

    async def run() -> int:
        async with opened(settings, application_name="paymanager:storage", max_size=1) as database:
            return await ensure_partitions(database.pool, settings, system_clock())

    typer.echo(f"months that gained partitions: {asyncio.run(run())}")


@storage_app.command("detach")
def detach(
    month: Annotated[
        str, typer.Argument(help="YYYY-MM, or `before` for everything before the monthly partitions.")
    ],
) -> None:
    """Detach one month of settlements, intents and ledger transfers (DETACH ... CONCURRENTLY) and
    record the ledger's sums; the detached tables stay for you to dump and drop (docs/OPERATIONS.md)."""
    from paymanager.application.storage.archive import ArchiveRefusedError, DetachedMonth, detach_month
    from paymanager.cli._command import fail, load_settings
    from paymanager.db.database import opened

    settings = load_settings()

    async def run() -> DetachedMonth:
        async with (
            opened(settings, application_name="paymanager:storage", max_size=1) as database,
            database.pool.acquire() as conn,
        ):
            return await detach_month(conn, month)

    try:
        detached = asyncio.run(run())
    except ArchiveRefusedError as exc:
        fail(str(exc), 2)
    for table, rows in detached.tables.items():
        typer.echo(f"{table}: detached, {rows} rows; dump it (pg_dump -t {table}) and drop it")


def register(app: typer.Typer) -> None:
    app.add_typer(storage_app, name="storage")
