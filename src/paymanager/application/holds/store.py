"""The ledger decision store: the only reader of `holds.sql`."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from paymanager.db.pool import Conn
from paymanager.db.sql import load_queries
from paymanager.domain.capture import Capture
from paymanager.domain.intents import IntentStatus

Q = load_queries("paymanager.application.holds", "holds.sql")


@dataclass(frozen=True, slots=True)
class Decision:
    """One row of `ledger_decision`: what the ledger is (or was) asked to do with an intent's holds."""

    intent_id: uuid.UUID
    post: bool
    status: IntentStatus
    reason: str | None
    # A capture's part of the hold to post; None: all of it (or a void).
    capture: Capture | None = None

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> Decision:
        capture = None if row["amount"] is None else Capture(row["amount"], row["fee"])
        status = IntentStatus.EXPIRED if row["expired"] else IntentStatus(row["status"])
        return cls(row["intent_id"], row["action"] == "post", status, row["reason"], capture)


def _stored_status(decision: Decision) -> str:
    """The status `ledger_decision` keeps: its CHECK (0700) predates expired holds, which it keeps as
    'failed' with `ledger_decision_capture.expired` set (migration 0350)."""
    return (IntentStatus.FAILED if decision.status is IntentStatus.EXPIRED else decision.status).value


class DecisionStore:
    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    async def take(
        self, *, wanted: list[Decision], decided_by: str, now: datetime
    ) -> dict[uuid.UUID, Decision]:
        """Record the decisions of `wanted` not taken yet (one statement, committed by the caller);
        every intent's decision, the earlier one where it existed."""
        rows = await self._conn.fetch(
            Q["decision_insert_many"],
            [d.intent_id for d in wanted], ["post" if d.post else "void" for d in wanted],
            [_stored_status(d) for d in wanted], [d.reason for d in wanted], decided_by, now,
            [d.capture.amount if d.capture else None for d in wanted],
            [d.capture.fee if d.capture else None for d in wanted],
            [d.status is IntentStatus.EXPIRED for d in wanted],
        )  # fmt: skip
        found = {row["intent_id"]: Decision.from_row(row) for row in rows}
        for decision in wanted:
            if decision.intent_id not in found:
                # Inserted by another transaction after this statement's snapshot: read it now.
                existing = await self.get(intent_id=decision.intent_id)
                assert existing is not None, "a conflicting decision exists"
                found[decision.intent_id] = existing
        return found

    async def get(self, *, intent_id: uuid.UUID) -> Decision | None:
        row = await self._conn.fetchrow(Q["decision_get"], intent_id)
        return None if row is None else Decision.from_row(row)

    async def take_hold_id(self, *, intent_id: uuid.UUID, fresh: uuid.UUID) -> uuid.UUID:
        """The intent's recorded hold id, or `fresh`, recorded now."""
        found: uuid.UUID | None = await self._conn.fetchval(Q["hold_take"], intent_id, fresh)
        if found is None:  # recorded by another transaction after this statement's snapshot
            found = await self.hold_id(intent_id=intent_id)
        assert found is not None, "a hold id is recorded"
        return found

    async def renew_hold_id(self, *, intent_id: uuid.UUID, burned: uuid.UUID, fresh: uuid.UUID) -> None:
        await self._conn.execute(Q["hold_renew"], intent_id, burned, fresh)

    async def hold_id(self, *, intent_id: uuid.UUID) -> uuid.UUID | None:
        found: uuid.UUID | None = await self._conn.fetchval(Q["hold_get"], intent_id)
        return found

    async def hold_ids(self, *, intent_ids: list[uuid.UUID]) -> dict[uuid.UUID, uuid.UUID]:
        """The recorded hold id of each of `intent_ids` that has one."""
        rows = await self._conn.fetch(Q["hold_get_many"], intent_ids)
        return {row["intent_id"]: row["hold_id"] for row in rows}
