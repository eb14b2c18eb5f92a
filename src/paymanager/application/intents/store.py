"""The intent store: the only reader of `intents.sql`; rows in, `Intent` values out.

Every statement on the `intent` and `settlement` tables is a method here, called with keyword
arguments (a parameter dataclass for the wide ones). A column change touches this module and the
`Intent` dataclass, nothing else.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime

import asyncpg

from paymanager.application.policies.store import policy_from_json
from paymanager.db.pool import Conn
from paymanager.db.sql import load_queries
from paymanager.domain.capture import Capture
from paymanager.domain.channels import PAYOUT_CHANNEL_PSPS, AccountKind
from paymanager.domain.intents import CaptureMethod, IntentStatus
from paymanager.domain.policies import Policy

Q = load_queries("paymanager.application.intents", "intents.sql")


@dataclass(frozen=True, slots=True)
class Intent:
    """One row of `intent`."""

    id: uuid.UUID
    service_id: str
    channel: str
    status: IntentStatus
    amount: int
    fee: int
    currency: str
    payer_account_id: uuid.UUID
    payee_account_id: uuid.UUID
    fee_account_id: uuid.UUID | None
    description: str | None
    metadata: dict[str, object]
    version: int
    failure_reason: str | None
    hold_id: uuid.UUID | None
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None
    confirmed_at: datetime | None
    settle_deadline_at: datetime | None
    finished_at: datetime | None
    capture_method: CaptureMethod = CaptureMethod.AUTOMATIC
    # What a capture posted of the hold (manual intents, once settled).
    amount_captured: int | None = None
    fee_captured: int | None = None

    @property
    def manual(self) -> bool:
        return self.capture_method is CaptureMethod.MANUAL

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> Intent:
        return cls(
            id=row["id"],
            service_id=row["service_id"],
            channel=row["channel"],
            status=IntentStatus(row["status"]),
            amount=row["amount"],
            fee=row["fee"],
            currency=row["currency"],
            payer_account_id=row["payer_account_id"],
            payee_account_id=row["payee_account_id"],
            fee_account_id=row["fee_account_id"],
            description=row["description"],
            metadata=row["metadata"],
            version=row["version"],
            failure_reason=row["failure_reason"],
            hold_id=row["hold_id"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            expires_at=row["expires_at"],
            confirmed_at=row["confirmed_at"],
            settle_deadline_at=row["settle_deadline_at"],
            finished_at=row["finished_at"],
            capture_method=CaptureMethod(row["capture_method"]),
            amount_captured=row["amount_captured"],
            fee_captured=row["fee_captured"],
        )


@dataclass(frozen=True, slots=True)
class NewIntent:
    """The columns of `intent_insert`."""

    id: uuid.UUID
    service_id: str
    channel: str
    amount: int
    fee: int
    currency: str
    payer_account_id: uuid.UUID
    payee_account_id: uuid.UUID
    fee_account_id: uuid.UUID | None
    description: str | None
    metadata: dict[str, object]
    now: datetime
    expires_at: datetime | None
    capture_method: CaptureMethod = CaptureMethod.AUTOMATIC


@dataclass(frozen=True, slots=True)
class Party:
    """An account as a new intent checks it: whether it exists, its kind, currency and owner."""

    id: uuid.UUID
    kind: AccountKind
    currency: str
    owner_service_id: str | None


@dataclass(frozen=True, slots=True)
class ConfirmedRef:
    """A confirmed intent as the reconciler walks them: by deadline, then id."""

    id: uuid.UUID
    settle_deadline_at: datetime


@dataclass(frozen=True, slots=True)
class Settled:
    """One intent of `finish_settled_many`: where it goes, why, and its event's NOTIFY text."""

    id: uuid.UUID
    status: IntentStatus
    reason: str | None
    outcome: str
    notice: str


@dataclass(frozen=True, slots=True)
class PartiesAndPolicies:
    accounts: dict[uuid.UUID, Party] = field(default_factory=dict)
    policies: list[Policy] = field(default_factory=list)


def _one(row: asyncpg.Record | None) -> Intent | None:
    return Intent.from_row(row) if row is not None else None


class IntentStore:
    """The intent statements on one connection (usually the caller's open transaction)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    async def insert(self, new: NewIntent) -> Intent:
        row = await self._conn.fetchrow(
            Q["intent_insert"], new.id, new.service_id, new.channel, new.amount, new.fee, new.currency,
            new.payer_account_id, new.payee_account_id, new.fee_account_id, new.description, new.metadata,
            new.now, new.expires_at, new.capture_method.value,
        )  # fmt: skip
        assert row is not None, "an insert without a conflict clause returns its row"
        return Intent.from_row(row)

    async def parties_and_policies(
        self, *, account_ids: list[uuid.UUID], channel: str, service_id: str
    ) -> PartiesAndPolicies:
        """The accounts among `account_ids` that exist, and the policies of `channel` that apply to
        `service_id`, in one round trip."""
        found = PartiesAndPolicies()
        for row in await self._conn.fetch(Q["intent_parties_and_policies"], account_ids, channel, service_id):
            if row["policy"] is None:
                found.accounts[row["id"]] = Party(
                    row["id"], AccountKind(row["kind"]), row["currency"], row["owner_service_id"]
                )
            else:
                found.policies.append(policy_from_json(row["policy"]))
        return found

    async def get(self, *, intent_id: uuid.UUID, lock: bool = False) -> Intent | None:
        """The intent; `lock` takes its row lock (FOR UPDATE) until the transaction ends."""
        return _one(await self._conn.fetchrow(Q["intent_lock" if lock else "intent_get"], intent_id))

    async def confirm(
        self,
        *,
        intent_id: uuid.UUID,
        now: datetime,
        settle_deadline_at: datetime,
        capture_deadline_at: datetime,
        hold_id: uuid.UUID,
    ) -> Intent | None:
        """Confirmed (a manual intent: requires_capture, its deadline `capture_deadline_at`) and locked;
        None when the intent is unknown, not created, or past its expiry."""
        return _one(
            await self._conn.fetchrow(
                Q["intent_confirm"], intent_id, now, settle_deadline_at, hold_id, capture_deadline_at
            )
        )

    async def finish(
        self,
        *,
        intent_id: uuid.UUID,
        status: IntentStatus,
        from_status: IntentStatus,
        now: datetime,
        reason: str | None,
    ) -> Intent | None:
        return _one(
            await self._conn.fetchrow(
                Q["intent_finish"], intent_id, status.value, from_status.value, now, reason
            )
        )

    async def finish_settled(
        self,
        *,
        intent_id: uuid.UUID,
        status: IntentStatus,
        from_status: IntentStatus,
        now: datetime,
        reason: str | None,
        outcome: str,
        settled_by: str,
        captured: Capture | None = None,
    ) -> Intent | None:
        """`finish` and the settlement row, in one statement; `captured`: what a capture posted (the
        settlement row records it instead of the whole amount and fee)."""
        row = await self._conn.fetchrow(
            Q["intent_finish_settled"], intent_id, status.value, from_status.value, now, reason, outcome,
            settled_by, captured.amount if captured else None, captured.fee if captured else None,
        )  # fmt: skip
        return _one(row)

    async def finish_settled_many(
        self, *, settled: list[Settled], now: datetime, settled_by: str, notify_channel: str
    ) -> int:
        """`finish_settled` for locked, confirmed intents, each NOTIFYing its `notice`; how many ended."""
        done = await self._conn.fetch(
            Q["intent_finish_settled_many"], [s.id for s in settled], [s.status.value for s in settled],
            [s.reason for s in settled], [s.outcome for s in settled], [s.notice for s in settled], now,
            settled_by, notify_channel,
        )  # fmt: skip
        return len(done)

    async def set_hold_id(self, *, intent_id: uuid.UUID, hold_id: uuid.UUID) -> None:
        """A confirming intent's new hold id (TigerBeetle refused the first: holds/resolve.py)."""
        await self._conn.execute(Q["intent_set_hold_id"], intent_id, hold_id)

    async def lock_many(self, *, intent_ids: list[uuid.UUID]) -> list[Intent]:
        """The intents of `intent_ids` that exist, locked in id order."""
        rows = await self._conn.fetch(Q["intent_lock_many"], sorted(set(intent_ids)))
        return [Intent.from_row(row) for row in rows]

    async def lock_confirmed_many(self, *, intent_ids: list[uuid.UUID]) -> list[uuid.UUID]:
        """Those of `intent_ids` still confirmed and not locked by anyone else, locked, in id order."""
        return [row["id"] for row in await self._conn.fetch(Q["intent_confirmed_lock_many"], intent_ids)]

    async def page(
        self,
        *,
        service_id: str | None,
        status: str | None,
        channel: str | None,
        account_id: uuid.UUID | None,
        before: uuid.UUID | None,
        limit: int,
    ) -> list[Intent]:
        """Newest first; `service_id` None: every service's."""
        rows = await self._conn.fetch(
            Q["intent_list"], service_id, status, channel, account_id, before, limit
        )
        return [Intent.from_row(row) for row in rows]

    async def history(self, *, account_id: uuid.UUID, before: uuid.UUID | None, limit: int) -> list[Intent]:
        """Intents where the account pays, is paid or takes the fee, newest first."""
        rows = await self._conn.fetch(Q["intent_history"], account_id, before, limit)
        return [Intent.from_row(row) for row in rows]

    async def daily_volume(self, *, payer_account_id: uuid.UUID, channel: str, since: datetime) -> int:
        used: int = await self._conn.fetchval(Q["intent_daily_volume"], payer_account_id, channel, since)
        return used

    async def confirmed_after(self, *, after: tuple[datetime, uuid.UUID], limit: int) -> list[ConfirmedRef]:
        """Confirmed intents the outbox settles, by deadline then id, after the cursor `after`."""
        rows = await self._conn.fetch(
            Q["intent_confirmed_batch"], after[0], after[1], limit, list(PAYOUT_CHANNEL_PSPS)
        )
        return [ConfirmedRef(row["id"], row["settle_deadline_at"]) for row in rows]

    async def capture_due_lock(self, *, now: datetime, limit: int) -> list[Intent]:
        """Manual intents whose capture deadline passed at `now`, still uncaptured, locked (rows locked
        elsewhere, by a capture or a cancel, are skipped)."""
        rows = await self._conn.fetch(Q["intent_capture_due"], now, limit)
        return [Intent.from_row(row) for row in rows]

    async def expire_due(self, *, now: datetime, limit: int, reason: str) -> list[Intent]:
        """Created invoices past `expires_at`, expired (rows locked elsewhere are skipped)."""
        rows = await self._conn.fetch(Q["intent_expire_due"], now, limit, reason)
        return [Intent.from_row(row) for row in rows]

    async def notify(self, *, channel: str, text: str) -> None:
        """NOTIFY on the connection's transaction: delivered only if it commits."""
        await self._conn.execute(Q["intent_notify"], channel, text)
