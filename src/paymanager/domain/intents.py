"""The payment intent state machine (drawn in docs/state_machines.md, enforced again by the schema).

    created --confirm--> confirmed --settle--> settled
       |                     |------fail----> failed
       |                     '-----cancel---> cancelled
       |--confirm (manual)--> requires_capture --capture--> settled
       |                          |---------fail---------> failed
       |                          |--------cancel--------> cancelled
       |                          '---capture deadline---> expired
       |------cancel------> cancelled
       '------expire------> expired      (merchant-invoice only)

A confirmed intent holds its funds with pending ledger transfers; settled posts them, failed and
cancelled void them. An intent created with `capture_method=manual` is confirmed into
`requires_capture`: its funds are held until the merchant captures part or all of them (the rest is
released) or the capture deadline voids the hold. Terminal states never change again.
"""

from __future__ import annotations

from enum import StrEnum

from paymanager.domain.errors import InvalidTransitionError


class IntentStatus(StrEnum):
    CREATED = "created"
    CONFIRMED = "confirmed"
    REQUIRES_CAPTURE = "requires_capture"
    SETTLED = "settled"
    FAILED = "failed"
    CANCELLED = "cancelled"
    EXPIRED = "expired"


class CaptureMethod(StrEnum):
    """Who ends a confirmed intent's hold: the settlement job at once, or the merchant's capture."""

    AUTOMATIC = "automatic"
    MANUAL = "manual"


class SettlementOutcome(StrEnum):
    """What the settlement did to the pending transfers of a confirmed intent."""

    POSTED = "posted"
    VOIDED = "voided"


TERMINAL: frozenset[IntentStatus] = frozenset(
    {IntentStatus.SETTLED, IntentStatus.FAILED, IntentStatus.CANCELLED, IntentStatus.EXPIRED}
)

TRANSITIONS: dict[IntentStatus, frozenset[IntentStatus]] = {
    IntentStatus.CREATED: frozenset(
        {IntentStatus.CONFIRMED, IntentStatus.REQUIRES_CAPTURE, IntentStatus.CANCELLED, IntentStatus.EXPIRED}
    ),
    IntentStatus.CONFIRMED: frozenset({IntentStatus.SETTLED, IntentStatus.FAILED, IntentStatus.CANCELLED}),
    IntentStatus.REQUIRES_CAPTURE: frozenset(
        {IntentStatus.SETTLED, IntentStatus.FAILED, IntentStatus.CANCELLED, IntentStatus.EXPIRED}
    ),
    IntentStatus.SETTLED: frozenset(),
    IntentStatus.FAILED: frozenset(),
    IntentStatus.CANCELLED: frozenset(),
    IntentStatus.EXPIRED: frozenset(),
}


# The statuses in which an intent's funds are held by pending ledger transfers.
HOLDING: frozenset[IntentStatus] = frozenset({IntentStatus.CONFIRMED, IntentStatus.REQUIRES_CAPTURE})


def can_transition(
    current: IntentStatus, target: IntentStatus, *, expires: bool, manual: bool = False
) -> bool:
    """True when `current -> target` is an edge for this intent: a created intent expires only on a
    channel whose intents expire (an uncaptured hold expires at its deadline whatever the channel),
    and is confirmed into `requires_capture` when `manual`, into `confirmed` otherwise."""
    if current is IntentStatus.CREATED and target is IntentStatus.EXPIRED and not expires:
        return False
    if target is IntentStatus.REQUIRES_CAPTURE and not manual:
        return False
    if target is IntentStatus.CONFIRMED and manual:
        return False
    return target in TRANSITIONS[current]


def transition(
    current: IntentStatus, target: IntentStatus, *, expires: bool, manual: bool = False
) -> IntentStatus:
    """`target`, or `InvalidTransitionError` naming both states and the allowed ones."""
    if not can_transition(current, target, expires=expires, manual=manual):
        allowed = sorted(
            s.value
            for s in TRANSITIONS[current]
            if can_transition(current, s, expires=expires, manual=manual)
        )
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
