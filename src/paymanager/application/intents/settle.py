"""End an intent's saga: post its holds (settled) or void them (failed, cancelled), exactly once.

`finish` runs on the caller's transaction under the intent's row lock: the settlement job (inside
its lease-fenced completion), a cancel, and the reconciler all go through it, so whichever comes
first ends the intent and the others find it finished. The `settlement` row's primary key is the
schema's guarantee of once.

The `intent.settle` job settles through `settle_many`: the jobs a worker runs at once share one
transaction (`paymanager.jobs.batch`), each still fenced by its own lease, and the group's intents are
locked, posted, finished and announced in a few statements whatever its size. Cancel and the
reconciler keep the single-intent `finish`.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime

from paymanager.application.context import Payments
from paymanager.application.holds import resolve
from paymanager.application.intents import events
from paymanager.application.intents.store import Intent, IntentStore, Settled
from paymanager.db.pool import Conn
from paymanager.domain.capture import Capture
from paymanager.domain.errors import DomainError
from paymanager.domain.intents import HOLDING, IntentStatus, SettlementOutcome, transition
from paymanager.jobs import JobContext, PermanentError
from paymanager.jobs.batch import SharedTransactions
from paymanager.logging import get_logger

log = get_logger("paymanager.settlement")

DEADLINE_PASSED = "settlement deadline passed"
EXPIRED = "the invoice expired before it was confirmed"


async def finish(
    payments: Payments,
    conn: Conn,
    row: Intent,
    target: IntentStatus,
    *,
    settled_by: str,
    reason: str | None = None,
    capture: Capture | None = None,
) -> Intent:
    """Move a locked intent (confirmed, awaiting its capture, or created) to `target`, resolving its
    holds; returns it. `capture` posts that part of the hold (a manual intent's capture) and releases
    the rest; the intent and its settlement row record it.

    The holds go through the ledger-decision step (holds/resolve.py), on either backend. On
    TigerBeetle an earlier decision wins: a cancel after a decided post answers invalid_transition,
    and an intent whose void was decided ends as that decision says (a decided capture, with the
    amount it decided)."""
    channel = payments.channels.get(row.channel)
    transition(row.status, target, expires=channel.expires, manual=row.manual)
    now = payments.clock()
    store = IntentStore(conn)
    if row.status in HOLDING:
        if target is IntentStatus.CANCELLED:
            resolve.refuse_undoing(await resolve.decision_of(payments, conn, row.id), target, row.status)
        (resolved,) = await resolve.resolve_holds(
            payments, conn, [resolve.Plan(row, target, reason, capture)], decided_by=settled_by
        )
        if isinstance(resolved, Exception):
            raise resolved
        target, reason, posted = resolved.target, resolved.reason, resolved.posted
        if target is IntentStatus.SETTLED and not posted:
            # The ledger expired the holds first: the money never moved, so the intent failed.
            target, reason = IntentStatus.FAILED, "the ledger expired the hold before settlement"
        outcome = SettlementOutcome.POSTED if target is IntentStatus.SETTLED else SettlementOutcome.VOIDED
        updated = await store.finish_settled(
            intent_id=row.id, status=target, from_status=row.status, now=now, reason=reason,
            outcome=outcome.value, settled_by=settled_by,
            captured=resolved.capture if outcome is SettlementOutcome.POSTED else None,
        )  # fmt: skip
    else:
        # A confirm lost between TigerBeetle's hold and its commit left a hold: release it now.
        await resolve.release_unconfirmed_hold(payments, conn, row)
        updated = await store.finish(
            intent_id=row.id, status=target, from_status=row.status, now=now, reason=reason
        )
    assert updated is not None, "the row lock guarantees the status did not change"
    await events.notify(conn, events.event_payload(updated))
    return updated


async def settle(payments: Payments, conn: Conn, intent_id: uuid.UUID, *, settled_by: str) -> Intent | None:
    """Settle a confirmed intent (or fail it past its deadline); None when there is nothing to do."""
    row = await IntentStore(conn).get(intent_id=intent_id, lock=True)
    if row is None:
        raise PermanentError(f"intent {intent_id} does not exist")
    if row.status is not IntentStatus.CONFIRMED:
        return None  # Cancelled or failed meanwhile, or settled by an earlier claim of this job.
    assert row.settle_deadline_at is not None, "a confirmed intent has its deadline"
    if payments.clock() >= row.settle_deadline_at:
        return await finish(
            payments, conn, row, IntentStatus.FAILED, settled_by=settled_by, reason=DEADLINE_PASSED
        )
    return await finish(payments, conn, row, IntentStatus.SETTLED, settled_by=settled_by)


@dataclass(frozen=True, slots=True)
class FinishPlan:
    """What a group settlement will do to one locked, confirmed intent."""

    row: Intent
    target: IntentStatus
    reason: str | None


Outcome = events.Event | Exception | None


async def settle_many(
    payments: Payments, conn: Conn, intent_ids: list[uuid.UUID], *, settled_by: str
) -> list[Outcome]:
    """`settle` for a group of intents in the caller's transaction, in a few statements whatever its
    size; per id (in the order given): the event of the intent's change, None when there was nothing
    to do, or the exception that intent alone met (nothing of it was written).

    Per-intent failures are found before anything is written for that intent: a missing intent, a
    transition the domain refuses, or a ledger refusal, which the ledger reports per intent (each
    intent's legs are one linked chain, applied or refused as a whole), so no savepoint is needed.
    Semantics are `settle`'s: a deadline passed voids and fails, a hold the ledger already expired
    fails. An error of a statement itself fails the whole group (the caller's transaction rolls back)."""
    rows = {row.id: row for row in await IntentStore(conn).lock_many(intent_ids=intent_ids)}
    now = payments.clock()
    outcomes: list[Outcome] = [None] * len(intent_ids)
    plans: list[tuple[int, FinishPlan]] = []
    seen: dict[uuid.UUID, int] = {}
    duplicates: list[tuple[int, int]] = []
    for index, intent_id in enumerate(intent_ids):
        row = rows.get(intent_id)
        if row is None:
            outcomes[index] = PermanentError(f"intent {intent_id} does not exist")
        elif row.status is IntentStatus.CONFIRMED and intent_id in seen:
            duplicates.append((index, seen[intent_id]))  # shares the first job's fate (below)
        elif row.status is IntentStatus.CONFIRMED:
            seen[intent_id] = index
            try:
                plans.append((index, _plan(payments, row, now)))
            except DomainError as exc:  # an unknown channel or a refused transition: this intent's
                outcomes[index] = exc
    ended = await finish_many(payments, conn, [plan for _, plan in plans], settled_by=settled_by)
    for (index, _), outcome in zip(plans, ended, strict=True):
        outcomes[index] = outcome
    for index, first in duplicates:  # finished by the first job, or refused with it: never "done" alone
        outcomes[index] = outcomes[first] if isinstance(outcomes[first], Exception) else None
    return outcomes


async def finish_many(
    payments: Payments, conn: Conn, plans: list[FinishPlan], *, settled_by: str
) -> list[events.Event | Exception]:
    """`finish` for locked, confirmed intents, each to its planned target, in a few statements
    whatever their number (one ledger batch, one statement for the status updates, settlement rows
    and NOTIFYs); per plan its event, or the exception that intent alone met (nothing of it written)."""
    now = payments.clock()
    resolved = await resolve.resolve_holds(
        payments, conn, [resolve.Plan(p.row, p.target, p.reason) for p in plans], decided_by=settled_by
    )
    outcomes: list[events.Event | Exception | None] = [None] * len(plans)
    finished: list[tuple[int, FinishPlan]] = []
    for index, (planned, outcome) in enumerate(zip(plans, resolved, strict=True)):
        if isinstance(outcome, Exception):
            outcomes[index] = outcome
            continue
        # The decision's status and reason: on TigerBeetle an earlier decision wins over this plan.
        plan, posted = FinishPlan(planned.row, outcome.target, outcome.reason), outcome.posted
        if plan.target is IntentStatus.SETTLED and not posted:
            # The ledger expired the holds first: the money never moved, so the intent failed.
            plan = FinishPlan(plan.row, IntentStatus.FAILED, "the ledger expired the hold before settlement")
        finished.append((index, plan))
    announced = await _finish_many(conn, [plan for _, plan in finished], now, settled_by)
    for (index, _), event in zip(finished, announced, strict=True):
        outcomes[index] = event
    assert all(outcome is not None for outcome in outcomes), "every plan ends or fails"
    return [outcome for outcome in outcomes if outcome is not None]


def _plan(payments: Payments, row: Intent, now: datetime) -> FinishPlan:
    """Where a locked, confirmed intent goes: settled, or failed past its deadline."""
    assert row.settle_deadline_at is not None, "a confirmed intent has its deadline"
    late = now >= row.settle_deadline_at
    target = IntentStatus.FAILED if late else IntentStatus.SETTLED
    transition(row.status, target, expires=payments.channels.get(row.channel).expires)
    return FinishPlan(row, target, DEADLINE_PASSED if late else None)


async def _finish_many(
    conn: Conn, plans: list[FinishPlan], now: datetime, settled_by: str
) -> list[events.Event]:
    """One statement: the status updates, settlement rows and NOTIFYs of `plans`; their events, in order."""
    if not plans:
        return []
    # The rows are locked, so each event is known before the update: the version goes up by one.
    notices = [
        events.event_payload(
            dataclasses.replace(plan.row, status=plan.target, version=plan.row.version + 1, updated_at=now)
        )
        for plan in plans
    ]
    settled = [
        Settled(
            id=plan.row.id,
            status=plan.target,
            reason=plan.reason,
            outcome=(
                SettlementOutcome.POSTED if plan.target is IntentStatus.SETTLED else SettlementOutcome.VOIDED
            ).value,
            notice=events.notify_text(notice),
        )
        for plan, notice in zip(plans, notices, strict=True)
    ]
    done = await IntentStore(conn).finish_settled_many(
        settled=settled, now=now, settled_by=settled_by, notify_channel=events.NOTIFY_CHANNEL
    )
    assert done == len(plans), "the row locks guarantee every planned intent was confirmed"
    return notices


def settle_handler(
    payments: Payments, *, batch_max: int | None = None
) -> Callable[[JobContext], Awaitable[None]]:
    """The `intent.settle` job: the intents of concurrently running jobs settle together in shared
    transactions (jobs/batch.py), each fenced by its job's lease; after each commit their Redis
    events go out in one round trip. `batch_max` defaults to `outbox_batch_size`."""
    settings = payments.settings

    async def work(conn: Conn, items: list[tuple[JobContext, uuid.UUID]]) -> list[Outcome]:
        return await settle_many(
            payments, conn, [intent_id for _, intent_id in items], settled_by=payments.process_id
        )

    async def after_commit(committed: list[events.Event | None]) -> None:
        await publish_many(payments, [payload for payload in committed if payload is not None])

    shared: SharedTransactions[uuid.UUID, events.Event | None] = SharedTransactions(
        payments.pool,
        work,
        batch_max=batch_max or settings.outbox_batch_size,
        batches_in_flight_max=settings.outbox_settle_batches_in_flight,
        after_commit=after_commit,
    )

    async def handle(ctx: JobContext) -> None:
        await shared.run(ctx, uuid.UUID(str(ctx.payload["intent_id"])))

    return handle


async def publish_many(payments: Payments, payloads: list[events.Event]) -> None:
    """Best effort after the commit, one round trip for a group: see `publish`."""
    if not payloads:
        return
    try:
        await payments.publisher.publish_many([(events.topic(str(p["intent_id"])), p) for p in payloads])
    except Exception as exc:
        log.warning("events not published to Redis", intents=len(payloads), error=repr(exc))


async def publish(payments: Payments, payload: events.Event) -> None:
    """Best effort after the commit: a Redis failure must not undo or retry a committed settlement."""
    try:
        await payments.publisher.publish(events.topic(str(payload["intent_id"])), payload)
    except Exception as exc:
        log.warning("event not published to Redis", intent_id=payload["intent_id"], error=repr(exc))
