"""Accounts: open a user or merchant account (our row and its ledger account), balance, history."""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass

from paymanager.application import ledger_ops
from paymanager.application.accounts.store import Account, AccountStore
from paymanager.application.context import Payments
from paymanager.application.errors import AccountReferenceTakenError
from paymanager.application.intents.store import Intent, IntentStore
from paymanager.application.services.use_cases import ServiceIdentity
from paymanager.db.pool import Conn
from paymanager.domain.channels import AccountKind, system_account_names
from paymanager.domain.errors import InvalidInputError, NotFoundError
from paymanager.domain.money import CURRENCIES, currency

HISTORY_LIMIT_MAX = 100


@dataclass(frozen=True, slots=True)
class OpenAccount:
    kind: AccountKind
    currency: str
    reference: str | None = None


def account_view(account: Account) -> dict[str, object]:
    return {
        "id": str(account.id),
        # The same account in the ledger (`paymanager ledger balance` takes either): the id's 128 bits
        # as a decimal string, since JSON numbers lose precision past 2^53.
        "ledger_account_id": str(account.id.int),
        "kind": account.kind.value,
        "currency": account.currency,
        "name": account.name,
        "reference": account.reference,
        "owner_service_id": account.owner_service_id,
        "created_at": account.created_at.isoformat(),
    }


async def open_account(
    payments: Payments, conn: Conn, caller: ServiceIdentity, request: OpenAccount
) -> Account:
    """Create the account row and its ledger account in the caller's transaction."""
    if request.kind is AccountKind.SYSTEM:
        raise InvalidInputError("system accounts are created by paymanager itself", {"kind": "system"})
    currency(request.currency)
    account_id = ledger_ops.new_account_id()
    account = await AccountStore(conn).insert(
        account_id=account_id, kind=request.kind, currency=request.currency, owner_service_id=caller.id,
        reference=request.reference, now=payments.clock(),
    )  # fmt: skip
    if account is None:
        raise AccountReferenceTakenError(
            "this service already has an account with that reference", {"reference": request.reference}
        )
    await ledger_ops.open_account(payments.ledger, conn, account_id, request.currency, request.kind)
    return account


async def get_account(conn: Conn, caller: ServiceIdentity, account_id: uuid.UUID) -> Account:
    """The account, if it exists and the caller may see it (its owner, or an admin)."""
    account = await AccountStore(conn).get(account_id=account_id)
    if account is None or not (caller.is_admin or account.owner_service_id == caller.id):
        raise NotFoundError("no such account", {"account_id": str(account_id)})
    return account


async def balance(payments: Payments, caller: ServiceIdentity, account_id: uuid.UUID) -> dict[str, object]:
    async with payments.pool.acquire() as conn:
        account = await get_account(conn, caller, account_id)
    figures = await ledger_ops.balance(payments.ledger, account_id)
    return {
        "account_id": str(account_id),
        "ledger_account_id": str(account_id.int),
        "currency": account.currency,
        **figures,
    }


async def history(
    payments: Payments, caller: ServiceIdentity, account_id: uuid.UUID, cursor: uuid.UUID | None, limit: int
) -> tuple[list[Intent], bool]:
    """Intents that moved money of the account, newest first; and whether more follow.

    An intent another service created (a payment into this account) shows its amounts, parties and
    status, but not that service's own description and metadata, as `GET /intents/{id}` shows it
    nothing at all."""
    async with payments.pool.acquire() as conn:
        await get_account(conn, caller, account_id)
        intents = await IntentStore(conn).history(account_id=account_id, before=cursor, limit=limit + 1)
    shown = [
        intent
        if caller.is_admin or intent.service_id == caller.id
        else dataclasses.replace(intent, description=None, metadata={})
        for intent in intents[:limit]
    ]
    return shown, len(intents) > limit


async def seed_system_accounts(payments: Payments) -> None:
    """Create (once) and verify the system accounts of every currency, and load their ids."""
    wanted = [(name, code) for code in CURRENCIES for name in system_account_names(code)]
    await ledger_ops.ensure_system_accounts(
        payments.ledger, [(ledger_ops.system_account_id(name), code) for name, code in wanted]
    )
    async with payments.pool.acquire() as conn, conn.transaction():
        store = AccountStore(conn)
        for name, code in wanted:
            await store.insert_system(account_id=ledger_ops.system_account_id(name), currency=code, name=name)
        payments.system_accounts = await store.system_ids()
    missing = [name for name, _ in wanted if name not in payments.system_accounts]
    if missing:
        raise RuntimeError(f"system accounts missing after seeding: {missing}")
