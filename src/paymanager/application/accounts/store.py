"""The account store: the only reader of `accounts.sql`."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from paymanager.db.pool import Conn
from paymanager.db.sql import load_queries
from paymanager.domain.channels import AccountKind

Q = load_queries("paymanager.application.accounts", "accounts.sql")


@dataclass(frozen=True, slots=True)
class Account:
    """One row of `account` (our side of a ledger account, which has the same id)."""

    id: uuid.UUID
    kind: AccountKind
    currency: str
    name: str | None
    owner_service_id: str | None
    reference: str | None
    created_at: datetime

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> Account:
        return cls(
            id=row["id"],
            kind=AccountKind(row["kind"]),
            currency=row["currency"],
            name=row["name"],
            owner_service_id=row["owner_service_id"],
            reference=row["reference"],
            created_at=row["created_at"],
        )


class AccountStore:
    __slots__ = ("_conn",)

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    async def insert(
        self,
        *,
        account_id: uuid.UUID,
        kind: AccountKind,
        currency: str,
        owner_service_id: str,
        reference: str | None,
        now: datetime,
    ) -> Account | None:
        """The new account; None when the owner already has an account with `reference`."""
        row = await self._conn.fetchrow(
            Q["account_insert"], account_id, kind.value, currency, owner_service_id, reference, now
        )
        return Account.from_row(row) if row is not None else None

    async def get(self, *, account_id: uuid.UUID) -> Account | None:
        row = await self._conn.fetchrow(Q["account_get"], account_id)
        return Account.from_row(row) if row is not None else None

    async def lock(self, *, account_id: uuid.UUID) -> None:
        """Serialise the daily-volume checks of one payer account until the transaction ends."""
        await self._conn.execute(Q["account_lock"], account_id)

    async def insert_system(self, *, account_id: uuid.UUID, currency: str, name: str) -> None:
        """Create a system account unless one of that name exists."""
        await self._conn.execute(Q["account_insert_system"], account_id, currency, name)

    async def system_ids(self) -> dict[str, uuid.UUID]:
        """Every system account's id by name."""
        return {row["name"]: row["id"] for row in await self._conn.fetch(Q["account_system_list"])}
