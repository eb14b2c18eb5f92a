"""The session actions' job handlers: DEBIT_GIFT, AUTHORIZE_PSP, CAPTURE_PSP, CANCEL_GIFT, RELEASE_HOLD.

Each runs in three steps:

1. under the session's lock, check the action still applies and write `attempted_at` before any call
   (write-ahead: a leg attempted and still pending has an unknown outcome, which an end of the
   session compensates by the leg's key);
2. the provider call, outside any transaction, with the idempotency key derived from the leg; a
   provider that cannot be reached raises, and the job is retried on the outbox schedule with the
   SAME key (the provider answers a repeat with the first outcome: never a second debit);
3. the outcome, recorded under the session's lock in a fenced transaction that completes the job
   (shared by the actions the worker runs at once: recording.py): a worker that lost its lease
   cannot record anything, and the next one repeats the call with the same key.

CAPTURE_PSP skips step 1's lock and write: its leg was attempted by its authorisation, and a session
that completed never changes again, so a read suffices to know the capture applies (step 3 checks
again under the lock). The reads of the captures a worker starts at once are one statement.

A success that arrives after the session ended (the expiry or a cancel won the race) is recorded
and compensated at once: the loser's effects are undone, exactly once (one job per leg and action,
one key per provider operation).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from paymanager.application.ledger_ops import SessionSettlement
from paymanager.application.sessions import lifecycle
from paymanager.application.sessions.context import Sessions
from paymanager.application.sessions.outbox import (
    AUTHORIZE_PSP,
    CANCEL_GIFT,
    CAPTURE_PSP,
    DEBIT_GIFT,
    RELEASE_HOLD,
)
from paymanager.application.sessions.ports import (
    CardAcquirer,
    Declined,
    GiftCardProvider,
    Outcome,
    leg_key,
)
from paymanager.application.sessions.recording import Apply, Recorder
from paymanager.application.sessions.store import Leg, SessionStore
from paymanager.application.sessions.write_ahead import Locked, WriteAheads, locked_of
from paymanager.db.pool import Conn, Pool
from paymanager.domain.sessions import LegKind, LegStatus, SessionStatus, leg_transition
from paymanager.jobs import JobContext, PermanentError
from paymanager.jobs.batch import GroupRunner
from paymanager.logging import get_logger

log = get_logger("paymanager.sessions")

Handler = Callable[[JobContext], Awaitable[None]]
# The key of a leg's first operation, which its compensation and capture name as well.
DEBIT_OP, AUTHORIZE_OP = "debit", "authorize"


_Locked = Locked


class _Peeks:
    """The unlocked reads of the legs a worker's actions start at once, one statement per group."""

    def __init__(self, pool: Pool, *, batch_max: int, batches_in_flight_max: int) -> None:
        self._pool = pool
        self._groups: GroupRunner[uuid.UUID, Locked] = GroupRunner(
            self._read, batch_max=batch_max, batches_in_flight_max=batches_in_flight_max
        )

    async def peek(self, leg_id: uuid.UUID) -> Locked:
        """The session and legs of `leg_id`, read without a lock (the caller checks again under it)."""
        return await self._groups.submit(leg_id)

    async def _read(self, leg_ids: list[uuid.UUID]) -> list[Locked | Exception]:
        async with self._pool.acquire() as conn:
            found = await SessionStore(conn).with_legs_of_legs(leg_ids=leg_ids)
        outcomes: list[Locked | Exception] = []
        for leg_id in leg_ids:
            locked = locked_of(found, leg_id)
            outcomes.append(
                locked
                if locked is not None
                else PermanentError(f"checkout session leg {leg_id} does not exist")
            )
        return outcomes


@dataclass(frozen=True, slots=True)
class _Steps:
    """Steps 1 and 3 of every action, each grouped over the actions the worker runs at once."""

    write_aheads: WriteAheads
    recorder: Recorder
    peeks: _Peeks

    async def prepare(self, leg_id: uuid.UUID, applies: Callable[[Locked], bool]) -> Locked | None:
        """Step 1: the locked session and leg when the action still applies (attempted_at written)."""
        return await self.write_aheads.prepare(leg_id, applies)

    async def record(self, ctx: JobContext, leg_id: uuid.UUID, apply: Apply) -> None:
        await self.recorder.record(ctx, leg_id, apply)


def _leg_id(ctx: JobContext) -> uuid.UUID:
    try:
        return uuid.UUID(str(ctx.payload["leg_id"]))
    except (KeyError, ValueError) as exc:
        raise PermanentError(f"job {ctx.id} has no valid leg_id") from exc


async def _set_leg(sessions: Sessions, conn: Conn, leg: Leg, target: LegStatus, **fields: str | None) -> Leg:
    leg_transition(leg.kind, leg.status, target)
    changed = await SessionStore(conn).set_leg_status(
        leg_id=leg.id, status=target, from_status=leg.status, now=sessions.payments.clock(),
        provider_ref=fields.get("provider_ref"), reason=fields.get("reason"),
    )  # fmt: skip
    assert changed is not None, "legs change under their session's lock"
    return changed


async def _record_first_step(
    sessions: Sessions,
    conn: Conn,
    locked: _Locked,
    outcome: Outcome,
    settlements: list[SessionSettlement],
) -> _Locked | None:
    """Step 3 of a debit or an authorisation: the leg moves, then the session; the session and legs
    as they now stand, or None after the session's end (which moves its other legs too)."""
    leg = locked.leg
    if leg.status is not LegStatus.PENDING:
        return locked  # a compensation ended it first; the provider refused or undid this call by its key
    if isinstance(outcome, Declined):
        failed = await _set_leg(
            sessions, conn, leg, LegStatus.FAILED, reason=f"{outcome.code}: {outcome.message}"
        )
        if locked.session.status is not SessionStatus.PROCESSING:
            return locked.moved(failed)
        await lifecycle.end(
            sessions, conn, locked.session, locked.replaced(failed), SessionStatus.FAILED,
            reason=f"the {leg.kind.value} leg was declined: {outcome.code}",
        )  # fmt: skip
        return None
    success = LegStatus.CAPTURED if leg.kind is LegKind.GIFT_CARD else LegStatus.AUTHORIZED
    done = await _set_leg(sessions, conn, leg, success, provider_ref=outcome.reference)
    if locked.session.status is SessionStatus.PROCESSING:
        now = locked.moved(done)
        advanced = await lifecycle.advance(sessions, conn, locked.session, now.legs, settlements)
        return _Locked(advanced, now.legs, done)
    log.info(
        "leg succeeded after its session ended; compensating",
        session_id=str(locked.session.id), leg_id=str(leg.id), status=locked.session.status.value,
    )  # fmt: skip
    await lifecycle.compensate_late(sessions, conn, done)
    return locked.moved(done)


def _first_step_applies(locked: _Locked) -> bool:
    return locked.leg.status is LegStatus.PENDING and locked.session.status is SessionStatus.PROCESSING


def _first_step(sessions: Sessions, outcome: Outcome) -> Apply:
    async def apply(conn: Conn, locked: _Locked, settlements: list[SessionSettlement]) -> _Locked | None:
        return await _record_first_step(sessions, conn, locked, outcome, settlements)

    return apply


def debit_gift_handler(sessions: Sessions, provider: GiftCardProvider, steps: _Steps) -> Handler:
    async def handle(ctx: JobContext) -> None:
        leg_id = _leg_id(ctx)
        locked = await steps.prepare(leg_id, _first_step_applies)
        if locked is None:
            return
        outcome = await provider.debit(
            card=locked.leg.instrument, amount=locked.leg.amount, currency=locked.session.currency,
            idempotency_key=leg_key(leg_id, DEBIT_OP),
        )  # fmt: skip
        await steps.record(ctx, leg_id, _first_step(sessions, outcome))

    return handle


def authorize_psp_handler(sessions: Sessions, acquirer: CardAcquirer, steps: _Steps) -> Handler:
    async def handle(ctx: JobContext) -> None:
        leg_id = _leg_id(ctx)
        locked = await steps.prepare(leg_id, _first_step_applies)
        if locked is None:
            return
        outcome = await acquirer.authorize(
            token=locked.leg.instrument, amount=locked.leg.amount, currency=locked.session.currency,
            idempotency_key=leg_key(leg_id, AUTHORIZE_OP),
        )  # fmt: skip
        await steps.record(ctx, leg_id, _first_step(sessions, outcome))

    return handle


def capture_psp_handler(sessions: Sessions, acquirer: CardAcquirer, steps: _Steps) -> Handler:
    def applies(locked: _Locked) -> bool:
        return locked.leg.status is LegStatus.AUTHORIZED and locked.session.status is SessionStatus.COMPLETED

    async def handle(ctx: JobContext) -> None:
        leg_id = _leg_id(ctx)
        found: _Locked | None = await steps.peeks.peek(leg_id)
        if found is not None and found.leg.attempted_at is None:
            # Not attempted (it cannot be, once authorised): the write-ahead comes first, as for others.
            found = await steps.prepare(leg_id, applies)
        if found is None or not applies(found):
            return
        outcome = await acquirer.capture(
            authorization_key=leg_key(leg_id, AUTHORIZE_OP), amount=found.leg.amount
        )
        if isinstance(outcome, Declined):
            # The hold is gone at the acquirer (expired, released by hand): a person must look.
            raise PermanentError(f"the acquirer refused the capture of leg {leg_id}: {outcome.code}")
        reference = outcome.reference

        async def apply(conn: Conn, now: _Locked, settlements: list[SessionSettlement]) -> _Locked:
            if not applies(now):
                return now
            return now.moved(
                await _set_leg(sessions, conn, now.leg, LegStatus.CAPTURED, provider_ref=reference)
            )

        await steps.record(ctx, leg_id, apply)

    return handle


def _undo_applies(moved: LegStatus) -> Callable[[_Locked], bool]:
    """A compensation applies to a leg that moved money, or was attempted with an unknown outcome."""

    def applies(locked: _Locked) -> bool:
        leg = locked.leg
        unknown = leg.status is LegStatus.PENDING and leg.attempted_at is not None
        return leg.status is moved or unknown

    return applies


def _record_undo(
    sessions: Sessions, leg_id: uuid.UUID, outcome: Outcome, target: LegStatus, moved: LegStatus
) -> Apply:
    if isinstance(outcome, Declined):
        raise PermanentError(f"the provider refused the compensation of leg {leg_id}: {outcome.code}")
    reference = outcome.reference

    async def apply(conn: Conn, now: _Locked, settlements: list[SessionSettlement]) -> _Locked:
        if not _undo_applies(moved)(now):
            return now
        return now.moved(await _set_leg(sessions, conn, now.leg, target, provider_ref=reference))

    return apply


def cancel_gift_handler(sessions: Sessions, provider: GiftCardProvider, steps: _Steps) -> Handler:
    applies = _undo_applies(LegStatus.CAPTURED)

    async def handle(ctx: JobContext) -> None:
        leg_id = _leg_id(ctx)
        locked = await steps.prepare(leg_id, applies)
        if locked is None:
            return
        outcome = await provider.cancel(card=locked.leg.instrument, idempotency_key=leg_key(leg_id, DEBIT_OP))
        undo = _record_undo(sessions, leg_id, outcome, LegStatus.CANCELLED, LegStatus.CAPTURED)
        await steps.record(ctx, leg_id, undo)

    return handle


def release_hold_handler(sessions: Sessions, acquirer: CardAcquirer, steps: _Steps) -> Handler:
    applies = _undo_applies(LegStatus.AUTHORIZED)

    async def handle(ctx: JobContext) -> None:
        leg_id = _leg_id(ctx)
        locked = await steps.prepare(leg_id, applies)
        if locked is None:
            return
        outcome = await acquirer.release(authorization_key=leg_key(leg_id, AUTHORIZE_OP))
        undo = _record_undo(sessions, leg_id, outcome, LegStatus.RELEASED, LegStatus.AUTHORIZED)
        await steps.record(ctx, leg_id, undo)

    return handle


def action_handlers(sessions: Sessions) -> dict[str, Handler]:
    """Every action's handler, by job kind; the providers must be present."""
    gift, card = sessions.gift_cards, sessions.cards
    assert gift is not None, "session actions need the gift-card provider"
    assert card is not None, "session actions need the card acquirer"
    payments = sessions.payments
    batch_max, in_flight = (
        payments.settings.outbox_batch_size,
        payments.settings.outbox_settle_batches_in_flight,
    )
    # One set of groups for every action kind: a debit and an authorisation of one session share them.
    steps = _Steps(
        WriteAheads(payments.pool, payments.clock, batch_max=batch_max, batches_in_flight_max=in_flight),
        Recorder(payments.pool, payments.ledger, batch_max=batch_max, batches_in_flight_max=in_flight),
        _Peeks(payments.pool, batch_max=batch_max, batches_in_flight_max=in_flight),
    )
    return {
        DEBIT_GIFT: debit_gift_handler(sessions, gift, steps),
        AUTHORIZE_PSP: authorize_psp_handler(sessions, card, steps),
        CAPTURE_PSP: capture_psp_handler(sessions, card, steps),
        CANCEL_GIFT: cancel_gift_handler(sessions, gift, steps),
        RELEASE_HOLD: release_hold_handler(sessions, card, steps),
    }
