"""The refund store: the only reader of `refunds.sql`."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from paymanager.db.pool import Conn
from paymanager.db.sql import load_queries
from paymanager.domain.refunds import RefundStatus

Q = load_queries("paymanager.application.refunds", "refunds.sql")


@dataclass(frozen=True, slots=True)
class Refund:
    id: uuid.UUID
    intent_id: uuid.UUID
    service_id: str
    amount: int
    fee_refunded: int
    currency: str
    status: RefundStatus
    reason: str | None
    failure_reason: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> Refund:
        return cls(
            id=row["id"], intent_id=row["intent_id"], service_id=row["service_id"], amount=row["amount"],
            fee_refunded=row["fee_refunded"], currency=row["currency"], status=RefundStatus(row["status"]),
            reason=row["reason"], failure_reason=row["failure_reason"], created_at=row["created_at"],
            updated_at=row["updated_at"], finished_at=row["finished_at"],
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class NewRefund:
    id: uuid.UUID
    intent_id: uuid.UUID
    service_id: str
    amount: int
    fee_refunded: int
    currency: str
    reason: str | None
    now: datetime


class RefundStore:
    __slots__ = ("_conn",)

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    async def insert(self, new: NewRefund) -> Refund:
        row = await self._conn.fetchrow(
            Q["refund_insert"], new.id, new.intent_id, new.service_id, new.amount, new.fee_refunded,
            new.currency, new.reason, new.now,
        )  # fmt: skip
        assert row is not None
        return Refund.from_row(row)

    async def totals(self, *, intent_id: uuid.UUID) -> tuple[int, int]:
        row = await self._conn.fetchrow(Q["refund_totals"], intent_id)
        assert row is not None
        return int(row["amount"]), int(row["fee"])

    async def settled(self, *, intent_id: uuid.UUID) -> tuple[int, int] | None:
        """The amount and fee the intent settled with (a captured intent: what its capture posted), or
        None when it did not settle."""
        row = await self._conn.fetchrow(Q["refund_settled"], intent_id)
        return None if row is None else (int(row["amount"]), int(row["fee"]))

    async def get(self, *, refund_id: uuid.UUID, lock: bool = False) -> Refund | None:
        row = await self._conn.fetchrow(Q["refund_lock" if lock else "refund_get"], refund_id)
        return None if row is None else Refund.from_row(row)

    async def list_for(self, *, intent_id: uuid.UUID, limit: int) -> list[Refund]:
        return [Refund.from_row(r) for r in await self._conn.fetch(Q["refund_list"], intent_id, limit)]

    async def finish(
        self, *, refund_id: uuid.UUID, status: RefundStatus, failure_reason: str | None, now: datetime
    ) -> Refund | None:
        row = await self._conn.fetchrow(Q["refund_finish"], refund_id, status.value, failure_reason, now)
        return None if row is None else Refund.from_row(row)
