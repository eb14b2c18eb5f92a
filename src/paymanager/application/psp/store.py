"""The PSP store: the only reader of `psp.sql`; rows in, frozen values out."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from paymanager.db.pool import Conn
from paymanager.db.sql import load_queries
from paymanager.domain.channels import PAYOUT_CHANNEL_PSPS
from paymanager.domain.psp import PspState, mask

Q = load_queries("paymanager.application.psp", "psp.sql")


@dataclass(frozen=True, slots=True)
class PspTx:
    """One row of `psp_tx`."""

    id: uuid.UUID
    intent_id: uuid.UUID
    psp: str
    state: PspState
    amount: int
    currency: str
    beneficiary: str
    idempotency_key: uuid.UUID
    attempts: int
    query_ref: str | None
    confirm_ref: str | None
    last_error: str | None
    version: int
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    resolved_by: str | None
    resolved_at: datetime | None
    resolution: str | None

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> PspTx:
        return cls(
            id=row["id"],
            intent_id=row["intent_id"],
            psp=row["psp"],
            state=PspState(row["state"]),
            amount=row["amount"],
            currency=row["currency"],
            beneficiary=row["beneficiary"],
            idempotency_key=row["idempotency_key"],
            attempts=row["attempts"],
            query_ref=row["query_ref"],
            confirm_ref=row["confirm_ref"],
            last_error=row["last_error"],
            version=row["version"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            finished_at=row["finished_at"],
            resolved_by=row["resolved_by"],
            resolved_at=row["resolved_at"],
            resolution=row["resolution"],
        )

    def __repr__(self) -> str:
        return (
            f"PspTx(id={self.id}, psp={self.psp}, state={self.state}, beneficiary={mask(self.beneficiary)})"
        )

    def view(self) -> dict[str, object]:
        """The JSON an operator or a caller sees: the account number masked."""
        return {
            "id": str(self.id),
            "intent_id": str(self.intent_id),
            "psp": self.psp,
            "state": self.state.value,
            "amount": self.amount,
            "currency": self.currency,
            "beneficiary": mask(self.beneficiary),
            "attempts": self.attempts,
            "query_ref": self.query_ref,
            "reference": self.confirm_ref,
            "last_error": self.last_error,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "resolved_by": self.resolved_by,
            "resolved_at": self.resolved_at.isoformat() if self.resolved_at else None,
            "resolution": self.resolution,
        }


@dataclass(frozen=True, slots=True)
class SealedConfig:
    psp: str
    key_id: str
    ciphertext: bytes
    updated_at: datetime

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> SealedConfig:
        return cls(row["psp"], row["key_id"], bytes(row["ciphertext"]), row["updated_at"])


@dataclass(frozen=True, slots=True)
class WebhookRow:
    psp: str
    event_id: str
    body: dict[str, object]
    processed_at: datetime | None
    outcome: str | None

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> WebhookRow:
        body = row["body"]
        return cls(row["psp"], row["event_id"], json.loads(body) if isinstance(body, str) else body,
                   row["processed_at"], row["outcome"])  # fmt: skip


@dataclass(frozen=True, slots=True)
class BalanceCheck:
    psp: str
    currency: str
    state: str
    ledger_balance: int | None
    partner_balance: int | None
    error: str | None
    checked_at: datetime
    changed_at: datetime

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> BalanceCheck:
        return cls(row["psp"], row["currency"], row["state"], row["ledger_balance"], row["partner_balance"],
                   row["error"], row["checked_at"], row["changed_at"])  # fmt: skip


@dataclass(frozen=True, slots=True)
class BalanceAlert:
    psp: str
    currency: str
    state: str
    previous_state: str | None
    raised_at: datetime

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> BalanceAlert:
        return cls(row["psp"], row["currency"], row["state"], row["previous_state"], row["raised_at"])


def _tx(row: asyncpg.Record | None) -> PspTx | None:
    return PspTx.from_row(row) if row is not None else None


class PspStore:
    """The PSP statements on one connection (usually the caller's open transaction)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    async def insert(
        self,
        *,
        tx_id: uuid.UUID,
        intent_id: uuid.UUID,
        psp: str,
        amount: int,
        currency: str,
        beneficiary: str,
        idempotency_key: uuid.UUID,
    ) -> PspTx | None:
        row = await self._conn.fetchrow(
            Q["psp_tx_insert"], tx_id, intent_id, psp, amount, currency, beneficiary, idempotency_key
        )
        return _tx(row)

    async def get(self, *, tx_id: uuid.UUID, lock: bool = False) -> PspTx | None:
        return _tx(await self._conn.fetchrow(Q["psp_tx_get_for_update" if lock else "psp_tx_get"], tx_id))

    async def get_started_many(self, *, tx_ids: list[uuid.UUID]) -> dict[uuid.UUID, PspTx]:
        """The transactions of `tx_ids` that exist, by id, those that were NEW moved to QUERY_PENDING by
        the same statement (the caller commits it before any call)."""
        rows = await self._conn.fetch(Q["psp_tx_get_started_many"], sorted(set(tx_ids)))
        return {tx.id: tx for tx in map(PspTx.from_row, rows)}

    async def query_accepted_many(self, *, accepted: list[tuple[PspTx, str]]) -> list[PspTx | None]:
        """Each `(tx, query_ref)` (QUERY_PENDING) moved through QUERIED to CONFIRM_PENDING, in one
        statement (the rows locked in id order): per pair in the order given, the moved transaction,
        or None when it changed since it was read."""
        order = sorted(range(len(accepted)), key=lambda i: accepted[i][0].id)
        rows = await self._conn.fetch(
            Q["psp_tx_query_accepted_many"], [accepted[i][0].id for i in order],
            [accepted[i][0].version for i in order], [accepted[i][1] for i in order],
        )  # fmt: skip
        moved: list[PspTx | None] = [None] * len(accepted)
        for row in rows:
            moved[order[row["given_at"] - 1]] = PspTx.from_row(row)
        return moved

    async def lock_many(self, *, tx_ids: list[uuid.UUID]) -> list[PspTx]:
        """The transactions of `tx_ids` that exist, locked in id order."""
        return [PspTx.from_row(r) for r in await self._conn.fetch(Q["psp_tx_lock_many"], sorted(set(tx_ids)))]

    async def end_many(self, *, ends: list[tuple[PspTx, PspState, str | None, str | None]]) -> list[PspTx]:
        """Each `(tx, state, reference, reason)` moved to its terminal state in one statement; the
        moved transactions (those unchanged since read: all of them when the caller locked them)."""
        assert all(state in (PspState.COMPLETED, PspState.FAILED) for _, state, _, _ in ends)
        rows = await self._conn.fetch(
            Q["psp_tx_end_many"], [tx.id for tx, _, _, _ in ends], [tx.version for tx, _, _, _ in ends],
            [state.value for _, state, _, _ in ends], [ref for _, _, ref, _ in ends],
            [reason for _, _, _, reason in ends],
        )  # fmt: skip
        return [PspTx.from_row(row) for row in rows]

    async def by_intent(self, *, intent_id: uuid.UUID) -> PspTx | None:
        return _tx(await self._conn.fetchrow(Q["psp_tx_by_intent"], intent_id))

    async def by_reference(self, *, psp: str, reference: str) -> PspTx | None:
        return _tx(await self._conn.fetchrow(Q["psp_tx_by_reference"], psp, reference))

    async def move(
        self,
        *,
        tx: PspTx,
        state: PspState,
        attempts: int | None = None,
        query_ref: str | None = None,
        confirm_ref: str | None = None,
        last_error: str | None = None,
        resolved_by: str | None = None,
        resolution: str | None = None,
    ) -> PspTx | None:
        """`tx` in `state` (or the same state with new fields); None when `tx` changed since it was read."""
        row = await self._conn.fetchrow(
            Q["psp_tx_move"], tx.id, tx.state.value, tx.version, state.value,
            tx.attempts if attempts is None else attempts, query_ref, confirm_ref, last_error,
            resolved_by, resolution,
        )  # fmt: skip
        return _tx(row)

    async def page(self, *, state: str | None, psp: str | None, limit: int) -> list[PspTx]:
        return [PspTx.from_row(r) for r in await self._conn.fetch(Q["psp_tx_list"], state, psp, limit)]

    async def open_without_job(self, *, limit: int) -> list[PspTx]:
        return [PspTx.from_row(r) for r in await self._conn.fetch(Q["psp_tx_open_without_job"], limit)]

    async def terminal_unsettled(self, *, limit: int) -> list[PspTx]:
        return [PspTx.from_row(r) for r in await self._conn.fetch(Q["psp_tx_terminal_unsettled"], limit)]

    async def payout_intents_without_tx(self, *, limit: int) -> list[uuid.UUID]:
        rows = await self._conn.fetch(Q["payout_intents_without_tx"], limit, list(PAYOUT_CHANNEL_PSPS))
        return [r["id"] for r in rows]

    async def put_config(self, *, psp: str, key_id: str, ciphertext: bytes) -> None:
        await self._conn.execute(Q["psp_config_upsert"], psp, key_id, ciphertext)

    async def get_config(self, *, psp: str) -> SealedConfig | None:
        row = await self._conn.fetchrow(Q["psp_config_get"], psp)
        return SealedConfig.from_row(row) if row is not None else None

    async def all_configs(self) -> list[SealedConfig]:
        return [SealedConfig.from_row(r) for r in await self._conn.fetch(Q["psp_config_all"])]

    async def insert_webhook(self, *, psp: str, event_id: str, body: str) -> bool:
        """True when stored; False for an event id seen before."""
        return await self._conn.fetchrow(Q["psp_webhook_insert"], psp, event_id, body) is not None

    async def get_webhook(self, *, psp: str, event_id: str) -> WebhookRow | None:
        row = await self._conn.fetchrow(Q["psp_webhook_get"], psp, event_id)
        return WebhookRow.from_row(row) if row is not None else None

    async def webhook_done(self, *, psp: str, event_id: str, outcome: str) -> None:
        await self._conn.execute(Q["psp_webhook_done"], psp, event_id, outcome)

    async def record_balance(
        self,
        *,
        psp: str,
        currency: str,
        state: str,
        ledger_balance: int | None,
        partner_balance: int | None,
        error: str | None,
    ) -> str | None:
        """Store the check; the state it replaced (None for the first check)."""
        row = await self._conn.fetchrow(
            Q["balance_check_upsert"], psp, currency, state, ledger_balance, partner_balance, error
        )
        assert row is not None
        previous: str | None = row["previous_state"]
        return previous

    async def insert_alert(
        self,
        *,
        psp: str,
        currency: str,
        state: str,
        previous_state: str | None,
        ledger_balance: int | None,
        partner_balance: int | None,
        error: str | None,
    ) -> None:
        await self._conn.execute(
            Q["balance_alert_insert"],
            psp,
            currency,
            state,
            previous_state,
            ledger_balance,
            partner_balance,
            error,
        )

    async def balance_checks(self) -> list[BalanceCheck]:
        return [BalanceCheck.from_row(r) for r in await self._conn.fetch(Q["balance_checks"])]

    async def balance_alerts(self, *, psp: str | None = None) -> list[BalanceAlert]:
        return [BalanceAlert.from_row(r) for r in await self._conn.fetch(Q["balance_alerts"], psp)]

    async def claim_balance_tick(self, *, psp: str, tick_ms: int) -> bool:
        return await self._conn.fetchrow(Q["balance_tick_claim"], psp, float(tick_ms)) is not None
