"""Checkout sessions (split tender): a merchant's amount paid by gift cards and one card leg.

A session and each of its legs have a state machine, drawn in docs/state_machines.md and enforced
twice: here (`session_transition`, `leg_transition`) and by the schema's triggers (migration 0800).

    session: open -> processing -> completed | failed | cancelled | expired
             open -> cancelled | expired
    gift leg: pending -> captured -> cancelled;  pending -> failed | cancelled
    card leg: pending -> authorized (held) -> captured | released;  pending -> failed | released

A pending leg goes straight to cancelled/released only when the session ends before anything was
sent for it (or after the compensation call for a leg whose outcome was unknown); a failed leg is
one the provider refused, so nothing moved.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from paymanager.domain.channels import FeeRule
from paymanager.domain.errors import DomainError, InvalidInputError, InvalidTransitionError


class SessionStatus(StrEnum):
    OPEN = "open"
    PROCESSING = "processing"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    EXPIRED = "expired"


class LegKind(StrEnum):
    GIFT_CARD = "gift_card"
    CARD = "card"


class LegStatus(StrEnum):
    PENDING = "pending"
    CAPTURED = "captured"
    AUTHORIZED = "authorized"
    CANCELLED = "cancelled"
    RELEASED = "released"
    FAILED = "failed"


SESSION_TERMINAL = frozenset(
    {SessionStatus.COMPLETED, SessionStatus.FAILED, SessionStatus.CANCELLED, SessionStatus.EXPIRED}
)
# The sessions the cleanup may expire and a cancel may end: neither finished nor past the point of no
# return (a completed session's card capture follows from an authorisation already held).
SESSION_ACTIVE = frozenset({SessionStatus.OPEN, SessionStatus.PROCESSING})

SESSION_TRANSITIONS: dict[SessionStatus, frozenset[SessionStatus]] = {
    SessionStatus.OPEN: frozenset({SessionStatus.PROCESSING, SessionStatus.CANCELLED, SessionStatus.EXPIRED}),
    SessionStatus.PROCESSING: frozenset(
        {SessionStatus.COMPLETED, SessionStatus.FAILED, SessionStatus.CANCELLED, SessionStatus.EXPIRED}
    ),
}

LEG_TRANSITIONS: dict[LegKind, dict[LegStatus, frozenset[LegStatus]]] = {
    LegKind.GIFT_CARD: {
        LegStatus.PENDING: frozenset({LegStatus.CAPTURED, LegStatus.FAILED, LegStatus.CANCELLED}),
        LegStatus.CAPTURED: frozenset({LegStatus.CANCELLED}),
    },
    LegKind.CARD: {
        LegStatus.PENDING: frozenset({LegStatus.AUTHORIZED, LegStatus.FAILED, LegStatus.RELEASED}),
        LegStatus.AUTHORIZED: frozenset({LegStatus.CAPTURED, LegStatus.RELEASED}),
    },
}

# The statuses each kind of leg can take (the schema's CHECK lists the same).
LEG_STATUSES: dict[LegKind, frozenset[LegStatus]] = {
    LegKind.GIFT_CARD: frozenset(
        {LegStatus.PENDING, LegStatus.CAPTURED, LegStatus.CANCELLED, LegStatus.FAILED}
    ),
    LegKind.CARD: frozenset(
        {LegStatus.PENDING, LegStatus.AUTHORIZED, LegStatus.CAPTURED, LegStatus.RELEASED, LegStatus.FAILED}
    ),
}

# The platform's fee on a completed session, charged to the merchant: 1% rounded up.
SESSION_FEE = FeeRule(rate_bps=100)
GIFT_LEGS_MAX = 10
AMOUNT_MAX = 1_000_000_000_000_000
CARD_REFERENCE_CHARS_MAX = 64


class SessionExpiredError(DomainError):
    code = "session_expired"


class LegsMismatchError(DomainError):
    code = "legs_do_not_sum_to_amount"


def session_transition(current: SessionStatus, target: SessionStatus) -> None:
    """Raise `InvalidTransitionError` unless the session machine draws current -> target."""
    if target not in SESSION_TRANSITIONS.get(current, frozenset()):
        raise InvalidTransitionError(
            f"a checkout session cannot go from {current.value} to {target.value}",
            {"from": current.value, "to": target.value},
        )


def can_transition(current: SessionStatus, target: SessionStatus) -> bool:
    return target in SESSION_TRANSITIONS.get(current, frozenset())


def leg_transition(kind: LegKind, current: LegStatus, target: LegStatus) -> None:
    """Raise `InvalidTransitionError` unless the machine of `kind` legs draws current -> target."""
    if target not in LEG_TRANSITIONS[kind].get(current, frozenset()):
        raise InvalidTransitionError(
            f"a {kind.value} leg cannot go from {current.value} to {target.value}",
            {"kind": kind.value, "from": current.value, "to": target.value},
        )


@dataclass(frozen=True, slots=True)
class LegRequest:
    kind: LegKind
    amount: int
    # The gift card's number, or the card's token at the acquirer.
    instrument: str


def check_legs(amount: int, legs: Sequence[LegRequest]) -> None:
    """A session's legs: at least one, at most one card leg, positive amounts, summing to `amount`."""
    if not 0 < amount <= AMOUNT_MAX:
        raise InvalidInputError("amount must be a positive integer in minor units", {"field": "amount"})
    if not legs:
        raise InvalidInputError("a session needs at least one leg", {"field": "legs"})
    cards = [leg for leg in legs if leg.kind is LegKind.CARD]
    gifts = [leg for leg in legs if leg.kind is LegKind.GIFT_CARD]
    if len(cards) > 1:
        raise InvalidInputError("a session has at most one card leg", {"field": "legs", "cards": len(cards)})
    if len(gifts) > GIFT_LEGS_MAX:
        raise InvalidInputError(
            f"a session has at most {GIFT_LEGS_MAX} gift-card legs",
            {"field": "legs", "gift_cards": len(gifts)},
        )
    for index, leg in enumerate(legs):
        if not 0 < leg.amount <= AMOUNT_MAX:
            raise InvalidInputError("every leg's amount must be positive", {"field": f"legs.{index}.amount"})
        if not 1 <= len(leg.instrument) <= CARD_REFERENCE_CHARS_MAX:
            raise InvalidInputError(
                f"a leg's card must be 1 to {CARD_REFERENCE_CHARS_MAX} characters",
                {"field": f"legs.{index}"},
            )
    numbers = [leg.instrument for leg in gifts]
    if len(set(numbers)) != len(numbers):
        raise InvalidInputError("a gift card appears twice in the legs", {"field": "legs"})
    total = sum(leg.amount for leg in legs)
    if total != amount:
        raise LegsMismatchError(
            "the legs must sum to the session's amount", {"amount": amount, "legs_total": total}
        )


def session_fee(amount: int) -> int:
    """The platform's fee on a completed session, never more than the amount."""
    return min(SESSION_FEE.fee_for(amount), amount)
