"""Confirm an intent: hold its funds with pending transfers and enqueue its settlement, atomically.

The hold, the status change and the settlement job commit in one transaction (the transactional
outbox): a rollback leaves no hold and no job, a commit leaves both. A manual intent is confirmed
into `requires_capture` with its hold and no job: its capture (capture.py) settles it.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from paymanager.application.context import Payments
from paymanager.application.holds import resolve
from paymanager.application.intents import events
from paymanager.application.intents.queries import check_visible, get_intent
from paymanager.application.intents.settle import EXPIRED, finish
from paymanager.application.intents.store import Intent, IntentStore
from paymanager.application.psp.payout import PAYOUT_CHANNELS, check_psp_served, start_payout
from paymanager.application.services.use_cases import ServiceIdentity
from paymanager.db.pool import Conn
from paymanager.domain.intents import IntentStatus, transition
from paymanager.jobs import OUTBOX_SCHEDULE, enqueue

SETTLE_KIND = "intent.settle"
OUTBOX_QUEUE = "outbox"
# The ledger's own expiry of a hold comes this long after our settlement deadline, so paymanager
# always resolves a hold itself and the ledger's timeout is only a backstop.
HOLD_TIMEOUT_MARGIN_SEC = 3_600
# A payout's hold must outlive any wait for the PSP, a manual review included: the ledger releasing
# it while the PSP may have paid would free money that left. Only the PSP's answer (or an operator's
# resolution) ends it; this is the ledger's backstop against a payout forgotten for good.
PAYOUT_HOLD_TIMEOUT_SEC = 90 * 86_400


def settle_unique_key(intent_id: uuid.UUID) -> str:
    return f"intent.settle:{intent_id}"


async def enqueue_settlement(
    payments: Payments, conn: Conn, intent_id: uuid.UUID, pending: events.Pending | None = None
) -> bool:
    """Enqueue the settlement job of an intent on `conn`; False when a live one already exists.

    With `pending`, the insert sends no NOTIFY: the queue is named in `pending.woken` and woken
    after the caller's commit (db/notices.py)."""
    result = await enqueue(
        conn,
        SETTLE_KIND,
        {"intent_id": str(intent_id)},
        queue=OUTBOX_QUEUE,
        max_attempts=payments.settings.outbox_max_attempts,
        backoff=OUTBOX_SCHEDULE,
        unique_key=settle_unique_key(intent_id),
        notify=pending is None,
    )
    if pending is not None and result.created:
        pending.woken.add(OUTBOX_QUEUE)
    return bool(result.created)


async def confirm_intent(
    payments: Payments,
    conn: Conn,
    caller: ServiceIdentity,
    intent_id: uuid.UUID,
    pending: events.Pending,
    *,
    hold_savepoint: bool = True,
) -> Intent:
    """The confirmed intent; or, for an invoice past `expires_at`, the intent now `expired`.

    The confirmed event is left in `pending.notified` and the settlement queue in `pending.woken`:
    the caller sends both after its commit (`run_idempotent`: db/notices.py).
    `hold_savepoint=False` when the caller runs its whole transaction again on `LedgerConflictError`
    (`run_idempotent` does): the hold then takes no savepoint, two round trips fewer.
    """
    now = payments.clock()
    deadline_sec = payments.settings.intent_settle_deadline_sec
    capture_window_sec = payments.settings.capture_window_sec
    hold_id = await resolve.hold_id_for(payments, intent_id)
    # The common case in one round trip: a created, unexpired intent is confirmed and locked by the
    # update itself. The rules below are checked on the updated row all the same, and a refusal rolls
    # the update back with the rest of the transaction.
    confirmed = await IntentStore(conn).confirm(
        intent_id=intent_id,
        now=now,
        settle_deadline_at=now + timedelta(seconds=deadline_sec),
        capture_deadline_at=now + timedelta(seconds=capture_window_sec),
        hold_id=hold_id,
    )
    if confirmed is None:
        return await _not_confirmable(payments, conn, caller, intent_id, now, pending)
    updated = check_visible(confirmed, caller, intent_id)
    channel = payments.channels.get(updated.channel)
    transition(IntentStatus.CREATED, updated.status, expires=channel.expires, manual=updated.manual)
    assert updated.expires_at is None or now < updated.expires_at, "the update skips expired ones"
    payload = events.event_payload(updated)
    if updated.manual:
        # Held until the merchant captures (intents/capture.py) or the capture deadline voids it
        # (reconcile.expire_due_captures): no settlement job.
        assert channel.manual_capture, "create refuses manual capture on other channels"
    elif channel.settles_on_confirm:
        await enqueue_settlement(payments, conn, intent_id, pending)
    elif updated.channel in PAYOUT_CHANNELS:
        # Refused before anything is held: PSP_NAMES may have lost the PSP since the intent was created.
        check_psp_served(payments, updated.channel)
        # The payout's PSP transaction (NEW) and its job commit with the hold, or neither does.
        await start_payout(payments, conn, updated)
    # On TigerBeetle the hold is made before this transaction commits: a crash or rollback between
    # the two leaves a hold whose id is recorded (holds/resolve.py), which a retried confirm finds
    # (`exists`), a cancel or expiry of the intent voids, and TigerBeetle's timeout releases at last.
    # The hold comes last: it locks the payer's and a fee shard's account rows until the commit, and
    # every confirm and settlement of those accounts queues behind that lock, so the fewer statements
    # run while it is held the shorter the queue. A refused hold still rolls all of this back.
    if updated.manual:
        timeout_sec = capture_window_sec + HOLD_TIMEOUT_MARGIN_SEC
    elif channel.settles_on_confirm:
        timeout_sec = deadline_sec + HOLD_TIMEOUT_MARGIN_SEC
    else:
        timeout_sec = PAYOUT_HOLD_TIMEOUT_SEC
    await resolve.hold(payments, conn, updated, hold_id, timeout_sec, savepoint=hold_savepoint)
    pending.published.append(payload)
    pending.notified.append(payload)
    return updated


async def _not_confirmable(
    payments: Payments,
    conn: Conn,
    caller: ServiceIdentity,
    intent_id: uuid.UUID,
    now: datetime,
    pending: events.Pending,
) -> Intent:
    """An intent `intent_confirm` left alone (unknown, not created, or an invoice past its expiry),
    decided under its row lock: the error that says why, or the invoice expired now (committed, and
    the caller learns it from the returned status)."""
    row = await get_intent(conn, caller, intent_id, lock=True)
    channel = payments.channels.get(row.channel)
    wanted = IntentStatus.REQUIRES_CAPTURE if row.manual else IntentStatus.CONFIRMED
    transition(row.status, wanted, expires=channel.expires, manual=row.manual)
    assert row.expires_at is not None, "a created intent that does not expire confirms"
    assert now >= row.expires_at, "a created, unexpired one confirms"
    expired = await finish(payments, conn, row, IntentStatus.EXPIRED, settled_by="confirm", reason=EXPIRED)
    pending.published.append(events.event_payload(expired))
    return expired
