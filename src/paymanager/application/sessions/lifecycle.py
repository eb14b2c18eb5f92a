"""How a session moves: each step runs on the caller's transaction, under the session's row lock.

Confirm, cancel, the actions and the cleanup all change a session only through these functions, with
the row locked (`SessionStore.get(lock=True)` or `lock_of_leg`), so whichever comes first decides and
the others find the session moved on:

- `begin` (confirm): open -> processing, and every leg's action at once (DEBIT_GIFT per gift leg,
  AUTHORIZE_PSP for the card leg), so the legs' provider calls run in parallel;
- `advance` (a leg captured or authorised): `complete` once every gift leg is captured and the card
  is held;
- `complete`: processing -> completed, CAPTURE_PSP for the held card, the merchant's
  `session.completed`, and the ledger's record of the merchant's settlement and the fee, which the
  caller writes with the others of its transaction (recording.py: one ledger batch per group);
- `end` (a refused leg, a cancel, the expiry): the terminal status, and in the same transaction the
  compensations: CANCEL_GIFT for each captured gift leg, RELEASE_HOLD for the held card, and the same
  for a leg whose call was made but whose outcome is unknown (the provider undoes it by its key);
  a leg never attempted ends at once. Then the merchant's event.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from paymanager.application import ledger_ops
from paymanager.application.sessions.context import Sessions
from paymanager.application.sessions.outbox import (
    AUTHORIZE_PSP,
    CANCEL_GIFT,
    CAPTURE_PSP,
    DEBIT_GIFT,
    RELEASE_HOLD,
    enqueue_action,
)
from paymanager.application.sessions.store import Leg, Session, SessionStore
from paymanager.db.pool import Conn
from paymanager.domain.channels import FEE_SHARDS, SystemAccount
from paymanager.domain.sessions import (
    SESSION_TERMINAL,
    LegKind,
    LegStatus,
    SessionStatus,
    leg_transition,
    session_transition,
)


@dataclass
class Compensations:
    """What an end of a session enqueued."""

    cancel_gifts: int = 0
    releases: int = 0


async def _enqueue(sessions: Sessions, conn: Conn, kind: str, leg_id: uuid.UUID) -> bool:
    return await enqueue_action(
        conn, kind, leg_id, max_attempts=sessions.payments.settings.outbox_max_attempts
    )


async def begin(sessions: Sessions, conn: Conn, session: Session, legs: list[Leg]) -> Session:
    """A locked open session starts processing: every leg's first action is enqueued at once (the
    legs run in parallel; a refusal of any ends the session and compensates the others)."""
    session_transition(session.status, SessionStatus.PROCESSING)
    now = sessions.payments.clock()
    updated = await SessionStore(conn).set_status(
        session_id=session.id, status=SessionStatus.PROCESSING, from_status=session.status, now=now
    )
    assert updated is not None, "the row lock guarantees the status did not change"
    for leg in legs:
        await _enqueue(sessions, conn, DEBIT_GIFT if leg.kind is LegKind.GIFT_CARD else AUTHORIZE_PSP, leg.id)
    return updated


async def advance(
    sessions: Sessions,
    conn: Conn,
    session: Session,
    legs: list[Leg],
    settlements: list[ledger_ops.SessionSettlement],
) -> Session:
    """After a leg of a locked processing session was captured or authorised: `complete` once every
    gift leg is captured and the card (if any) is held; else nothing yet."""
    assert session.status is SessionStatus.PROCESSING
    done = {LegKind.GIFT_CARD: LegStatus.CAPTURED, LegKind.CARD: LegStatus.AUTHORIZED}
    if any(leg.status is not done[leg.kind] for leg in legs):
        return session
    return await complete(sessions, conn, session, legs, settlements)


async def complete(
    sessions: Sessions,
    conn: Conn,
    session: Session,
    legs: list[Leg],
    settlements: list[ledger_ops.SessionSettlement],
) -> Session:
    """Every gift leg captured and the card held: the session is completed and the merchant paid.
    The ledger's record is appended to `settlements`: the caller writes it in the same transaction
    (`ledger_ops.record_session_settlements`), last, because it locks the merchant's and the
    funding account's rows until the commit and every completion paying them queues behind it."""
    session_transition(session.status, SessionStatus.COMPLETED)
    payments = sessions.payments
    now = payments.clock()
    updated = await SessionStore(conn).set_status(
        session_id=session.id, status=SessionStatus.COMPLETED, from_status=session.status, now=now
    )
    assert updated is not None, "the row lock guarantees the status did not change"
    for leg in legs:
        if leg.kind is LegKind.CARD and leg.status is LegStatus.AUTHORIZED:
            await _enqueue(sessions, conn, CAPTURE_PSP, leg.id)
    await sessions.notifier.emit(conn, updated, legs)
    settlements.append(
        ledger_ops.SessionSettlement(
            session_id=session.id, currency_code=session.currency,
            source_account_id=payments.system_account(SystemAccount.FUNDING, session.currency),
            merchant_account_id=session.merchant_account_id,
            fee_account_id=payments.system_account(
                SystemAccount.FEES, session.currency, session.id.int % FEE_SHARDS
            ),
            amount=session.amount, fee=session.fee,
        )
    )  # fmt: skip
    return updated


async def end(
    sessions: Sessions,
    conn: Conn,
    session: Session,
    legs: list[Leg],
    target: SessionStatus,
    reason: str | None = None,
) -> tuple[Session, Compensations]:
    """A locked active session ends failed, cancelled or expired, with its compensations enqueued."""
    assert target in SESSION_TERMINAL
    assert target is not SessionStatus.COMPLETED
    session_transition(session.status, target)
    now = sessions.payments.clock()
    store = SessionStore(conn)
    updated = await store.set_status(
        session_id=session.id, status=target, from_status=session.status, now=now, reason=reason
    )
    assert updated is not None, "the row lock guarantees the status did not change"
    enqueued = Compensations()
    final: list[Leg] = []
    for leg in legs:
        final.append(await _compensate(sessions, conn, leg, enqueued))
    await sessions.notifier.emit(conn, updated, final)
    return updated, enqueued


async def _compensate(sessions: Sessions, conn: Conn, leg: Leg, enqueued: Compensations) -> Leg:
    """The compensation of one leg of a session that just ended; the leg as it now stands."""
    gift = leg.kind is LegKind.GIFT_CARD
    undo = LegStatus.CANCELLED if gift else LegStatus.RELEASED
    moved = LegStatus.CAPTURED if gift else LegStatus.AUTHORIZED
    unknown = leg.status is LegStatus.PENDING and leg.attempted_at is not None
    if leg.status is moved or unknown:
        if await _enqueue(sessions, conn, CANCEL_GIFT if gift else RELEASE_HOLD, leg.id):
            if gift:
                enqueued.cancel_gifts += 1
            else:
                enqueued.releases += 1
        return leg
    if leg.status is LegStatus.PENDING:
        # Nothing was ever sent for it: it ends here, and its action (if queued) finds it ended.
        leg_transition(leg.kind, leg.status, undo)
        changed = await SessionStore(conn).set_leg_status(
            leg_id=leg.id, status=undo, from_status=leg.status, now=sessions.payments.clock(),
            reason="the session ended before the leg was attempted",
        )  # fmt: skip
        assert changed is not None, "legs change under their session's lock"
        return changed
    return leg


async def compensate_late(sessions: Sessions, conn: Conn, leg: Leg) -> bool:
    """A leg that succeeded after its session ended (the loser of a race with the end): its
    compensation, enqueued once. True when a job was enqueued."""
    kind = CANCEL_GIFT if leg.kind is LegKind.GIFT_CARD else RELEASE_HOLD
    return await _enqueue(sessions, conn, kind, leg.id)
