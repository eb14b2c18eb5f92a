"""The admin store: the only reader of `admin.sql` (the audit, intent search, service changes)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from paymanager.db.pool import Conn
from paymanager.db.sql import load_queries

Q = load_queries("paymanager.application.admin", "admin.sql")

# A JSON value as the audit keeps it (what jsonb decodes to).
Json = dict[str, object] | list[object] | str | int | float | bool | None


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One admin action: who, through what, what on which target, when, the state before and after."""

    id: int
    at: datetime
    actor: str
    via: str
    action: str
    target: str
    before: Json
    after: Json

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> AuditEntry:
        return cls(
            id=row["id"], at=row["at"], actor=row["actor"], via=row["via"], action=row["action"],
            target=row["target"], before=row["before"], after=row["after"],
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class IntentSummary:
    """An intent as the admin search lists it."""

    id: uuid.UUID
    service_id: str
    channel: str
    status: str
    amount: int
    fee: int
    currency: str
    payer_account_id: uuid.UUID
    payee_account_id: uuid.UUID
    failure_reason: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> IntentSummary:
        return cls(
            id=row["id"], service_id=row["service_id"], channel=row["channel"], status=row["status"],
            amount=row["amount"], fee=row["fee"], currency=row["currency"],
            payer_account_id=row["payer_account_id"], payee_account_id=row["payee_account_id"],
            failure_reason=row["failure_reason"], created_at=row["created_at"], updated_at=row["updated_at"],
            finished_at=row["finished_at"],
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class IntentFilter:
    """Which intents a search takes: every field that is not None must match."""

    intent_id: uuid.UUID | None = None
    service_id: str | None = None
    status: str | None = None
    channel: str | None = None
    account_id: uuid.UUID | None = None
    created_since: datetime | None = None
    created_until: datetime | None = None


@dataclass(frozen=True, slots=True)
class DisabledService:
    id: str
    name: str
    disabled_before: datetime | None
    disabled_at: datetime


class AdminStore:
    __slots__ = ("_conn",)

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    async def audit(
        self, *, actor: str, via: str, action: str, target: str, before: Json, after: Json
    ) -> AuditEntry:
        row = await self._conn.fetchrow(Q["audit_insert"], actor, via, action, target, before, after)
        assert row is not None
        return AuditEntry.from_row(row)

    async def audit_page(
        self, *, target: str | None, action: str | None, before_id: int | None, limit: int
    ) -> list[AuditEntry]:
        rows = await self._conn.fetch(Q["audit_list"], target, action, before_id, limit)
        return [AuditEntry.from_row(row) for row in rows]

    async def search_intents(self, *, where: IntentFilter, limit: int) -> list[IntentSummary]:
        rows = await self._conn.fetch(
            Q["intent_search"], where.intent_id, where.service_id, where.status, where.channel,
            where.account_id, where.created_since, where.created_until, limit,
        )  # fmt: skip
        return [IntentSummary.from_row(row) for row in rows]

    async def intent_counts(self) -> list[tuple[str, str, float]]:
        rows = await self._conn.fetch(Q["intent_count_by_channel_status"])
        return [(row["channel"], row["status"], float(row["n"])) for row in rows]

    async def disable_service(self, *, service_id: str) -> DisabledService | None:
        row = await self._conn.fetchrow(Q["service_disable"], service_id)
        if row is None:
            return None
        return DisabledService(row["id"], row["name"], row["disabled_before"], row["disabled_at"])

    async def rotate_secret(self, *, service_id: str, ciphertext: bytes, key_id: str) -> bool:
        return (
            await self._conn.fetchrow(Q["service_rotate_secret"], service_id, ciphertext, key_id) is not None
        )

    async def write_fact(self, *, name: str, value: dict[str, object]) -> None:
        await self._conn.execute(Q["snapshot_fact_write"], name, value)

    async def read_fact(self, *, name: str) -> tuple[dict[str, object], float] | None:
        row = await self._conn.fetchrow(Q["snapshot_fact_read"], name)
        if row is None or not isinstance(row["samples"], dict):
            return None
        return row["samples"], float(row["at_s"])
