"""`paymanager ledger`: accounts, balance, transfers and verify, on the configured ledger.

`balance` and `transfers` go through the ledger port, so they work on either backend
(`LEDGER_BACKEND`); `accounts` and `verify` read the PostgreSQL ledger's tables and say so on
TigerBeetle, which keeps its own invariants (debits equal credits) by construction."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

if TYPE_CHECKING:
    from paymanager.ledger.postgres import Verification

T = TypeVar("T")

ledger_app = typer.Typer(name="ledger", help="Inspect and verify the ledger.", no_args_is_help=True)

AccountArg = Annotated[
    str,
    typer.Argument(
        help="An API account id (a UUID, as `GET /accounts/{id}` shows it), a ledger account id (decimal "
        "or 0x hex: the API's `ledger_account_id`), or a system account name such as system.fees.THB."
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="One JSON document instead of text.")]
# The API's account ids are UUIDs in their canonical form; the ledger's id is the same 128 bits.
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.IGNORECASE)


_ACCOUNT_COLUMNS = [
    ("id", 40), ("ledger", 6), ("code", 5), ("flags", 5), ("debits_pending", 15), ("debits_posted", 15),
    ("credits_pending", 15), ("credits_posted", 15),
]  # fmt: skip
_TRANSFER_COLUMNS = [
    ("timestamp", 20), ("id", 40), ("side", 6), ("amount", 15), ("code", 5), ("flags", 5), ("pending_id", 40),
]  # fmt: skip


def _json_value(value: object) -> object:
    """Integers past JSON's exact range (2^53) as strings; everything else as it is."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 2**53:
        return str(value)
    return value


def _row(columns: list[tuple[str, int]], values: list[object]) -> str:
    return " ".join(f"{value!s:>{width}}" for (_, width), value in zip(columns, values, strict=True))


def parse_account(value: str) -> int:
    """An API account id (UUID), an id in decimal or hex, or else a name whose id is derived as
    `account_id_for` does."""
    from paymanager.ledger import account_id_for

    text = value.strip()
    if _UUID.match(text):
        return uuid.UUID(text).int
    if text.isdigit():
        return int(text)
    if text.lower().startswith("0x"):
        return int(text, 16)
    return account_id_for(text)


def _with_ledger(action: Callable[..., Awaitable[T]], *, postgres_only: str | None = None) -> T:
    from paymanager.cli._command import load_settings
    from paymanager.db.database import opened
    from paymanager.ledger import Ledger, LedgerUnavailableError, PostgresLedger, open_ledger

    settings = load_settings()
    if postgres_only and settings.ledger_backend != "postgres":
        typer.echo(f"{postgres_only} (LEDGER_BACKEND={settings.ledger_backend})", err=True)
        raise typer.Exit(1)

    async def run() -> T:
        async with opened(settings, application_name="paymanager:ledger", max_size=1) as database:
            ledger: Ledger
            if settings.ledger_backend == "postgres":
                ledger = PostgresLedger(database.pool)
            else:
                try:
                    ledger = await open_ledger(
                        settings.ledger_backend, pool=database.pool, tb_address=settings.tb_address,
                        tb_cluster_id=settings.tb_cluster_id, attempts=settings.ledger_connect_attempts,
                        backoff_ms=settings.ledger_connect_backoff_ms,
                    )  # fmt: skip
                except LedgerUnavailableError as exc:
                    typer.echo(f"error: {exc}", err=True)
                    raise typer.Exit(1) from None
            try:
                return await action(ledger)
            finally:
                await ledger.close()

    return asyncio.run(run())


@ledger_app.command()
def accounts(
    ledger_number: Annotated[
        int, typer.Option("--ledger", help="Only accounts of this ledger (0: all).")
    ] = 0,
    after: Annotated[str, typer.Option(help="Start after this account id (pagination).")] = "0",
    limit: Annotated[int, typer.Option(min=1, max=8189, help="At most this many accounts.")] = 50,
    as_json: JsonOption = False,
) -> None:
    """List accounts in id order with their balances."""
    found = _with_ledger(
        lambda lg: lg.list_accounts(after=parse_account(after), limit=limit, ledger=ledger_number),
        postgres_only="listing accounts reads the PostgreSQL ledger's tables; use `balance` on TigerBeetle",
    )
    if as_json:
        # Ids and amounts are u128: strings, which JSON readers do not round.
        typer.echo(
            json.dumps([{name: _json_value(getattr(a, name)) for name, _ in _ACCOUNT_COLUMNS} for a in found])
        )
        return
    typer.echo(_row(_ACCOUNT_COLUMNS, [name for name, _ in _ACCOUNT_COLUMNS]))
    for a in found:
        typer.echo(_row(_ACCOUNT_COLUMNS, [getattr(a, name) for name, _ in _ACCOUNT_COLUMNS]))


@ledger_app.command()
def balance(
    account: AccountArg,
    normal: Annotated[
        str | None, typer.Option(help="debit or credit (default: from the account's flags).")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Posted, pending and available balance of one account.

    Examples: `paymanager ledger balance system.funding.THB`, `paymanager ledger balance ACCOUNT_ID --json`
    (ACCOUNT_ID: an account's `id` or `ledger_account_id`, as `GET /accounts/{id}` shows them).
    """
    from paymanager.ledger import AccountNotFoundError

    if normal not in (None, "debit", "credit"):
        raise typer.BadParameter("normal must be debit or credit")
    account_id = parse_account(account)
    try:
        result = _with_ledger(lambda lg: lg.balance(account_id, normal))
    except AccountNotFoundError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(1) from None
    if as_json:
        fields = {
            "account": str(account_id), "normal": result.normal, "posted": result.posted,
            "pending": result.pending, "available": result.available,
        }  # fmt: skip
        typer.echo(json.dumps({k: _json_value(v) for k, v in fields.items()}))
        return
    typer.echo(f"account    {account_id}")
    typer.echo(f"normal     {result.normal}")
    typer.echo(f"posted     {result.posted}")
    typer.echo(f"pending    {result.pending}")
    typer.echo(f"available  {result.available}")


@ledger_app.command()
def transfers(
    account: AccountArg,
    since: Annotated[int, typer.Option(help="Only transfers with timestamp >= this (ns).")] = 0,
    until: Annotated[int, typer.Option(help="Only transfers with timestamp <= this (ns; 0: open).")] = 0,
    code: Annotated[int, typer.Option(help="Only transfers with this code (0: any).")] = 0,
    limit: Annotated[int, typer.Option(min=1, max=8189, help="At most this many transfers.")] = 50,
    newest_first: Annotated[bool, typer.Option("--reversed", help="Newest first.")] = False,
    as_json: JsonOption = False,
) -> None:
    """The transfers of one account, oldest first (next page: --since <last timestamp + 1>)."""
    account_id = parse_account(account)
    found = _with_ledger(
        lambda lg: lg.get_account_transfers(
            account_id,
            timestamp_min=since,
            timestamp_max=until,
            code=code,
            limit=limit,
            reversed=newest_first,
        )
    )
    rows = [
        [t.timestamp, t.id, "debit" if t.debit_account_id == account_id else "credit", t.amount, t.code,
         t.flags, t.pending_id or ""]
        for t in found
    ]  # fmt: skip
    if as_json:
        names = [name for name, _ in _TRANSFER_COLUMNS]
        typer.echo(json.dumps([dict(zip(names, map(_json_value, row), strict=True)) for row in rows]))
        return
    typer.echo(_row(_TRANSFER_COLUMNS, [name for name, _ in _TRANSFER_COLUMNS]))
    for values in rows:
        typer.echo(_row(_TRANSFER_COLUMNS, values))


@ledger_app.command()
def verify(as_json: JsonOption = False) -> None:
    """Check the ledger's invariants; exit 1 when one is violated. The outcome is kept for the
    `paymanager_ledger_verify_*` gauges (run it from a CronJob to alert on drift)."""
    from paymanager.application.admin.use_cases import record_verification
    from paymanager.cli._command import load_settings
    from paymanager.db.database import opened
    from paymanager.ledger import PostgresLedger

    settings = load_settings()
    if settings.ledger_backend != "postgres":
        typer.echo(
            "verify checks the PostgreSQL ledger's tables; TigerBeetle keeps them by itself"
            f" (LEDGER_BACKEND={settings.ledger_backend})",
            err=True,
        )
        raise typer.Exit(1)

    async def run() -> Verification:
        async with opened(settings, application_name="paymanager:ledger", max_size=1) as database:
            ledger = PostgresLedger(database.pool)
            try:
                outcome = await ledger.verify()
            finally:
                await ledger.close()
            await record_verification(database.pool, ok=outcome.ok, violations=len(outcome.violations))
            return outcome

    result = asyncio.run(run())
    if as_json:
        totals = (
            "accounts",
            "transfers",
            "debits_pending",
            "credits_pending",
            "debits_posted",
            "credits_posted",
        )
        document = {name: _json_value(getattr(result, name)) for name in totals}
        typer.echo(
            json.dumps({**document, "ok": result.ok, "violations": [str(v) for v in result.violations]})
        )
        raise typer.Exit(0 if result.ok else 1)
    typer.echo(f"accounts         {result.accounts}")
    typer.echo(f"transfers        {result.transfers}")
    typer.echo(f"debits_pending   {result.debits_pending}")
    typer.echo(f"credits_pending  {result.credits_pending}")
    typer.echo(f"debits_posted    {result.debits_posted}")
    typer.echo(f"credits_posted   {result.credits_posted}")
    if result.ok:
        typer.echo("ok: debits equal credits and every balance matches its transfers")
        return
    for violation in result.violations:
        typer.echo(f"VIOLATION: {violation}", err=True)
    raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.add_typer(ledger_app, name="ledger")
