"""The payment intent state machine (drawn in docs/state_machines.md, enforced again by the schema).

    created --confirm--> confirmed --settle--> settled
       |                     |------fail----> failed
       |                     '-----cancel---> cancelled
       |------cancel------> cancelled
       '------expire------> expired      (merchant-invoice only)

A confirmed intent holds its funds with pending ledger transfers; settled posts them, failed and
cancelled void them. Terminal states never change again.
"""

from __future__ import annotations

from enum import StrEnum

from paymanager.domain.errors import InvalidTransitionError


class IntentStatus(StrEnum):
    CREATED = "created"
    CONFIRMED = "confirmed"
    SETTLED = "settled"
    FAILED = "failed"
    CANCELLED = "cancelled"
    EXPIRED = "expired"


class SettlementOutcome(StrEnum):
    """What the settlement did to the pending transfers of a confirmed intent."""

    POSTED = "posted"
    VOIDED = "voided"


TERMINAL: frozenset[IntentStatus] = frozenset(
    {IntentStatus.SETTLED, IntentStatus.FAILED, IntentStatus.CANCELLED, IntentStatus.EXPIRED}
)

TRANSITIONS: dict[IntentStatus, frozenset[IntentStatus]] = {
    IntentStatus.CREATED: frozenset({IntentStatus.CONFIRMED, IntentStatus.CANCELLED, IntentStatus.EXPIRED}),
    IntentStatus.CONFIRMED: frozenset({IntentStatus.SETTLED, IntentStatus.FAILED, IntentStatus.CANCELLED}),
    IntentStatus.SETTLED: frozenset(),
    IntentStatus.FAILED: frozenset(),
    IntentStatus.CANCELLED: frozenset(),
    IntentStatus.EXPIRED: frozenset(),
}


def can_transition(current: IntentStatus, target: IntentStatus, *, expires: bool) -> bool:
    """True when `current -> target` is an edge; `expired` exists only for intents that expire."""
    if target is IntentStatus.EXPIRED and not expires:
        return False
    return target in TRANSITIONS[current]


def transition(current: IntentStatus, target: IntentStatus, *, expires: bool) -> IntentStatus:
    """`target`, or `InvalidTransitionError` naming both states and the allowed ones."""
    if not can_transition(current, target, expires=expires):
        allowed = sorted(s.value for s in TRANSITIONS[current] if can_transition(current, s, expires=expires))
        raise InvalidTransitionError(
            f"an intent cannot go from {current.value} to {target.value}",
            {"from": current.value, "to": target.value, "allowed": allowed},
        )
    return target


def settlement_status(outcome: SettlementOutcome, *, cancelled: bool) -> IntentStatus:
    """The final status a settlement gives: posted is settled; voided is cancelled or failed."""
    if outcome is SettlementOutcome.POSTED:
        return IntentStatus.SETTLED
    return IntentStatus.CANCELLED if cancelled else IntentStatus.FAILED
