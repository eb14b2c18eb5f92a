"""The ledger-decision step: post or void the holds of locked, confirmed intents, on either backend.

Every end of a confirmed intent goes through `resolve_holds` (the settle job's groups, a single
`finish` from a cancel, the reconciler, and any other code that settles an intent), which returns
per intent where it goes: the status, the reason and whether the ledger posted. The caller then
finishes the intent (status, `settlement` row) in the transaction that holds the intent's row lock.

- PostgreSQL ledger: the post/void joins the caller's transaction, so the ledger effect and the
  intent's end commit together; a refused intent's chain is rolled back with a savepoint and the
  others run again without it.
- TigerBeetle (a ledger that cannot join the transaction), the decide-then-apply protocol:
  1. decide: the decision (post or void, and the status it leads to) is INSERTed and committed on a
     connection of its own while the caller's transaction holds the intent's row lock (and, for the
     settle job, its job row under the lease). One decision per intent (primary key): an earlier
     decision wins, so a post and a void of one hold are never both attempted;
  2. apply: the ledger is asked with transfer ids derived from the hold and the action, so every
     retry gets `exists` (or `pending_transfer_already_posted/voided`) and never moves money twice;
  3. the caller finishes the intent, after the ledger answered.
  A crash anywhere leaves the intent confirmed: the next attempt (the retried job, the reconciler's
  re-enqueued job, a cancel) finds the decision and carries it out. docs/ARCHITECTURE.md lists the
  crash points.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from paymanager.application import ledger_ops
from paymanager.application.context import Payments
from paymanager.application.holds.store import Decision, DecisionStore
from paymanager.application.ids import new_hold_id
from paymanager.application.intents.store import Intent, IntentStore
from paymanager.db.pool import Conn
from paymanager.domain.capture import Capture
from paymanager.domain.errors import InsufficientFundsError, InvalidTransitionError
from paymanager.domain.intents import IntentStatus

# Crash points of the protocol, where `Payments.checkpoint` is called (tests inject failures there).
DECIDED = "ledger.decided"
APPLIED = "ledger.applied"
RELEASED = "ledger.released"  # unconfirmed holds voided, the intents' end not yet committed


async def hold_id_for(payments: Payments, intent_id: uuid.UUID) -> uuid.UUID:
    """The id of the hold a confirm is about to make: a new one on PostgreSQL (the hold commits or
    rolls back with the confirm); on TigerBeetle the recorded one, committed before the hold."""
    if ledger_ops.joins_transactions(payments.ledger):
        return new_hold_id()
    async with payments.side.acquire() as side:
        return await DecisionStore(side).take_hold_id(intent_id=intent_id, fresh=new_hold_id())


async def hold(
    payments: Payments, conn: Conn, intent: Intent, hold_id: uuid.UUID, timeout_sec: int, *, savepoint: bool
) -> None:
    """Hold the intent's funds (`ledger_ops.hold`). On TigerBeetle a refused hold burns its id, so the
    next confirm gets a fresh one; a hold whose id burned earlier (a crash after the refusal) is
    tried once with a fresh id."""
    if ledger_ops.joins_transactions(payments.ledger):
        await ledger_ops.hold(payments.ledger, conn, intent, hold_id, timeout_sec, savepoint=savepoint)
        return
    for attempt in (1, 2):
        try:
            await ledger_ops.hold(payments.ledger, conn, intent, hold_id, timeout_sec)
            return
        except ledger_ops.HoldIdBurnedError:
            if attempt == 2:
                raise
            hold_id = await _renew_hold_id(payments, intent.id, hold_id)
            await IntentStore(conn).set_hold_id(intent_id=intent.id, hold_id=hold_id)
        except (InsufficientFundsError, ledger_ops.LedgerRefusedError):
            await _renew_hold_id(payments, intent.id, hold_id)
            raise


async def _renew_hold_id(payments: Payments, intent_id: uuid.UUID, burned: uuid.UUID) -> uuid.UUID:
    fresh = new_hold_id()
    async with payments.side.acquire() as side:
        await DecisionStore(side).renew_hold_id(intent_id=intent_id, burned=burned, fresh=fresh)
    return fresh


async def release_unconfirmed_hold(payments: Payments, conn: Conn, row: Intent) -> None:
    """Before a created intent ends on TigerBeetle: void the hold a lost confirm may have left."""
    await release_unconfirmed_holds(payments, conn, [row])


async def release_unconfirmed_holds(payments: Payments, conn: Conn, rows: list[Intent]) -> None:
    """Before created intents (locked on `conn`) end on TigerBeetle: void, in one ledger batch, the
    holds lost confirms may have left. Only intents with a recorded hold id are sent; a crash before
    the caller commits leaves the intents created and the holds voided, and the retry's voids are
    answered `exists`. A created intent past its expiry cannot be confirmed meanwhile (the confirm
    expires it instead), so no confirm can take the voided hold for a live one."""
    if ledger_ops.joins_transactions(payments.ledger) or not rows:
        return
    recorded = await DecisionStore(conn).hold_ids(intent_ids=[row.id for row in rows])
    held = [(row, recorded[row.id]) for row in rows if row.id in recorded]
    if held:
        await ledger_ops.release_unconfirmed_holds(payments.ledger, held)
    await payments.checkpoint(RELEASED)


@dataclass(frozen=True, slots=True)
class Plan:
    """What the caller wants for one locked intent whose funds are held (confirmed, or awaiting its
    capture); `capture`: post that part of the hold and release the rest (None: all of it)."""

    row: Intent
    target: IntentStatus
    reason: str | None
    capture: Capture | None = None


@dataclass(frozen=True, slots=True)
class Resolved:
    """Where the intent goes now that the ledger answered; `posted` False for a void, or for a post
    that found the hold released (the caller then fails the intent); `capture`: the part posted, when
    a capture decided it (on TigerBeetle the earlier decision's, which may not be the plan's)."""

    target: IntentStatus
    reason: str | None
    posted: bool
    capture: Capture | None = None


async def resolve_holds(
    payments: Payments, conn: Conn, plans: list[Plan], *, decided_by: str
) -> list[Resolved | Exception]:
    """Post or void the holds of `plans` (locked on `conn`, holding funds); per plan its `Resolved`, or
    the exception that intent alone met (the ledger refused it: nothing of it is to be written)."""
    if not plans:
        return []
    if ledger_ops.joins_transactions(payments.ledger):
        posted = await _resolve_in_transaction(payments, conn, plans)
        return [
            p if isinstance(p, Exception) else Resolved(plan.target, plan.reason, p, plan.capture)
            for plan, p in zip(plans, posted, strict=True)
        ]
    return await _decide_then_apply(payments, plans, decided_by=decided_by)


async def decision_of(payments: Payments, conn: Conn, intent_id: uuid.UUID) -> Decision | None:
    """The decision already taken for an intent (always None on the PostgreSQL ledger)."""
    if ledger_ops.joins_transactions(payments.ledger):
        return None
    return await DecisionStore(conn).get(intent_id=intent_id)


def refuse_undoing(
    decision: Decision | None, target: IntentStatus, current: IntentStatus = IntentStatus.CONFIRMED
) -> None:
    """A cancel that comes after a post was decided has lost the race, as if the settlement had ended
    (a capture that comes after a void was decided likewise: the capture refuses it itself)."""
    if decision is not None and decision.post and target is not IntentStatus.SETTLED:
        raise InvalidTransitionError(
            f"the intent's settlement is already decided; it cannot become {target.value}",
            {"from": current.value, "to": target.value, "allowed": []},
        )


async def _resolve_in_transaction(
    payments: Payments, conn: Conn, plans: list[Plan]
) -> list[bool | Exception]:
    """resolve_many in a savepoint; when some chains are refused, the ledger's writes for them (the
    burned ids of transient refusals) are rolled back and the batch runs again without them, so a
    refused intent leaves nothing in the committed transaction."""
    resolved: list[bool | Exception] = [False] * len(plans)
    todo = list(range(len(plans)))
    while todo:
        savepoint = conn.transaction()
        await savepoint.start()
        results = await ledger_ops.resolve_many(
            payments.ledger,
            conn,
            [(plans[k].row, plans[k].target is IntentStatus.SETTLED) for k in todo],
            [plans[k].capture for k in todo],
        )
        refused = [k for k, r in zip(todo, results, strict=True) if isinstance(r, Exception)]
        if not refused:
            await savepoint.commit()
            for k, r in zip(todo, results, strict=True):
                resolved[k] = r
            break
        await savepoint.rollback()
        for k, r in zip(todo, results, strict=True):
            if isinstance(r, Exception):
                resolved[k] = r
        todo = [k for k in todo if k not in refused]
    return resolved


async def _decide_then_apply(
    payments: Payments, plans: list[Plan], *, decided_by: str
) -> list[Resolved | Exception]:
    wanted = [
        Decision(p.row.id, p.target is IntentStatus.SETTLED, p.target, p.reason, p.capture) for p in plans
    ]
    # Its own connection and transaction, committed before the ledger is asked: the caller's
    # transaction (which holds the intent locks) commits only after the ledger answered.
    async with payments.side.acquire() as side:
        decisions = await DecisionStore(side).take(wanted=wanted, decided_by=decided_by, now=payments.clock())
    await payments.checkpoint(DECIDED)
    chosen = [decisions[p.row.id] for p in plans]
    outcomes = await ledger_ops.resolve_many(
        payments.ledger,
        None,
        [(p.row, d.post) for p, d in zip(plans, chosen, strict=True)],
        [d.capture for d in chosen],
    )
    await payments.checkpoint(APPLIED)
    # The decision's status, not the plan's: an earlier decision wins. A post that found the hold
    # released comes back not posted, and the caller fails the intent as on the PostgreSQL ledger.
    return [
        outcome
        if isinstance(outcome, Exception)
        else Resolved(decision.status, decision.reason, decision.post and outcome, decision.capture)
        for decision, outcome in zip(chosen, outcomes, strict=True)
    ]
