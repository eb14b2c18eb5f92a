"""Accounts: open a user or merchant account (our row and its ledger account), balance, history."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from paymanager.application import ledger_ops
from paymanager.application.context import Payments
from paymanager.application.errors import AccountReferenceTakenError
from paymanager.application.services import ServiceIdentity
from paymanager.db.pool import Conn
from paymanager.db.sql import load_queries
from paymanager.domain.channels import AccountKind, system_account_names
from paymanager.domain.errors import InvalidInputError, NotFoundError
from paymanager.domain.money import CURRENCIES, currency

Q = load_queries("paymanager.application", "accounts.sql")
QI = load_queries("paymanager.application", "intents.sql")

HISTORY_LIMIT_MAX = 100


@dataclass(frozen=True, slots=True)
class OpenAccount:
    kind: AccountKind
    currency: str
    reference: str | None = None


def account_view(row: Any) -> dict[str, Any]:
    return {
        "id": str(row["id"]),
        "kind": row["kind"],
        "currency": row["currency"],
        "name": row["name"],
        "reference": row["reference"],
        "owner_service_id": row["owner_service_id"],
        "created_at": row["created_at"].isoformat(),
    }


async def open_account(payments: Payments, conn: Conn, caller: ServiceIdentity, request: OpenAccount) -> Any:
    """Create the account row and its ledger account in the caller's transaction."""
    if request.kind is AccountKind.SYSTEM:
        raise InvalidInputError("system accounts are created by paymanager itself", {"kind": "system"})
    currency(request.currency)
    account_id = ledger_ops.new_account_id()
    row = await conn.fetchrow(
        Q["account_insert"],
        account_id,
        request.kind.value,
        request.currency,
        caller.id,
        request.reference,
        payments.clock(),
    )
    if row is None:
        raise AccountReferenceTakenError(
            "this service already has an account with that reference", {"reference": request.reference}
        )
    await ledger_ops.open_account(payments.ledger, conn, account_id, request.currency, request.kind)
    return row


async def get_account(conn: Conn, caller: ServiceIdentity, account_id: uuid.UUID) -> Any:
    """The account, if it exists and the caller may see it (its owner, or an admin)."""
    row = await conn.fetchrow(Q["account_get"], account_id)
    if row is None or not (caller.is_admin or row["owner_service_id"] == caller.id):
        raise NotFoundError("no such account", {"account_id": str(account_id)})
    return row


async def balance(payments: Payments, caller: ServiceIdentity, account_id: uuid.UUID) -> dict[str, Any]:
    async with payments.pool.acquire() as conn:
        row = await get_account(conn, caller, account_id)
    figures = await ledger_ops.balance(payments.ledger, account_id)
    return {"account_id": str(account_id), "currency": row["currency"], **figures}


async def history(
    payments: Payments, caller: ServiceIdentity, account_id: uuid.UUID, cursor: uuid.UUID | None, limit: int
) -> tuple[list[Any], bool]:
    """Intents that moved money of the account, newest first; and whether more follow.

    An intent another service created (a payment into this account) shows its amounts, parties and
    status, but not that service's own description and metadata, as `GET /intents/{id}` shows it
    nothing at all."""
    async with payments.pool.acquire() as conn:
        await get_account(conn, caller, account_id)
        rows = await conn.fetch(QI["intent_history"], account_id, cursor, limit + 1)
    hidden: dict[str, Any] = {"description": None, "metadata": {}}
    shown = [
        row if caller.is_admin or row["service_id"] == caller.id else {**row, **hidden}
        for row in rows[:limit]
    ]
    return shown, len(rows) > limit


async def seed_system_accounts(payments: Payments) -> None:
    """Create (once) and verify the system accounts of every currency, and load their ids."""
    wanted = [(name, code) for code in CURRENCIES for name in system_account_names(code)]
    await ledger_ops.ensure_system_accounts(
        payments.ledger, [(ledger_ops.system_account_id(name), code) for name, code in wanted]
    )
    async with payments.pool.acquire() as conn, conn.transaction():
        for name, code in wanted:
            await conn.execute(Q["account_insert_system"], ledger_ops.system_account_id(name), code, name)
        rows = await conn.fetch(Q["account_system_list"])
    payments.system_accounts = {row["name"]: row["id"] for row in rows}
    missing = [name for name, _ in wanted if name not in payments.system_accounts]
    if missing:
        raise RuntimeError(f"system accounts missing after seeding: {missing}")
