"""Manual review: a person decides how a PSP transaction ended, after looking at the PSP's records.

A resolution is COMPLETED with the PSP's reference (the hold is posted) or FAILED with a reason (the
hold is voided), through the same `end_payout` the job uses, in one transaction; who, when and what
are kept on the row (resolved_by, resolved_at, resolution) and logged.
"""

from __future__ import annotations

import uuid

from paymanager.application.context import Payments
from paymanager.application.intents import events
from paymanager.application.psp.payout import end_payout
from paymanager.application.psp.store import PspStore, PspTx
from paymanager.db.pool import Conn
from paymanager.domain.errors import InvalidInputError, InvalidTransitionError, NotFoundError
from paymanager.domain.psp import PspState
from paymanager.logging import get_logger

log = get_logger("paymanager.psp.review")

LIST_LIMIT_MAX = 500
TEXT_CHARS_MAX = 200


async def get_tx(conn: Conn, tx_id: uuid.UUID) -> PspTx:
    tx = await PspStore(conn).get(tx_id=tx_id)
    if tx is None:
        raise NotFoundError("no such PSP transaction", {"psp_tx_id": str(tx_id)})
    return tx


async def list_txs(conn: Conn, *, state: str | None, psp: str | None, limit: int) -> list[PspTx]:
    if state is not None and state not in PspState.__members__:
        raise InvalidInputError(
            f"unknown state {state!r}", {"state": state, "known": list(PspState.__members__)}
        )
    if not 1 <= limit <= LIST_LIMIT_MAX:
        raise InvalidInputError(f"limit must be within [1, {LIST_LIMIT_MAX}]", {"limit": limit})
    return await PspStore(conn).page(state=state, psp=psp, limit=limit)


async def resolve(
    payments: Payments,
    conn: Conn,
    tx_id: uuid.UUID,
    *,
    completed_ref: str | None,
    failed_reason: str | None,
    by: str,
    pending: list[events.Event],
) -> PspTx:
    """End a transaction in MANUAL_REVIEW on `conn` (the caller's transaction); the intent's event is
    appended to `pending`, to publish after the commit."""
    if (completed_ref is None) == (failed_reason is None):
        raise InvalidInputError("give exactly one of a completed reference or a failure reason", {})
    text = (completed_ref or failed_reason or "").strip()
    if not 1 <= len(text) <= TEXT_CHARS_MAX:
        raise InvalidInputError(f"the reference or reason must be 1 to {TEXT_CHARS_MAX} characters", {})
    if not text.isprintable():
        raise InvalidInputError("the reference or reason must be printable text", {})
    tx = await PspStore(conn).get(tx_id=tx_id, lock=True)
    if tx is None:
        raise NotFoundError("no such PSP transaction", {"psp_tx_id": str(tx_id)})
    if tx.state is not PspState.MANUAL_REVIEW:
        raise InvalidTransitionError(
            f"only a transaction in MANUAL_REVIEW can be resolved; this one is {tx.state.value}",
            {"from": tx.state.value, "allowed": [PspState.COMPLETED.value, PspState.FAILED.value]},
        )
    target = PspState.COMPLETED if completed_ref is not None else PspState.FAILED
    resolution = f"{target.value.lower()}: {text}"
    event = await end_payout(
        payments, conn, tx, target,
        reference=text if completed_ref is not None else None,
        reason=f"resolved by {by}: {text}" if failed_reason is not None else None,
        resolved_by=by, resolution=resolution,
    )  # fmt: skip
    if event is not None:
        pending.append(event)
    resolved = await PspStore(conn).get(tx_id=tx_id)
    assert resolved is not None
    log.warning("PSP transaction resolved by hand", psp_tx_id=str(tx_id), intent_id=str(tx.intent_id),
                by=by, resolution=resolution)  # fmt: skip
    return resolved
