"""The checkout-session and leg state machines: properties over random walks, and the legs' rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from paymanager.domain.errors import InvalidInputError, InvalidTransitionError
from paymanager.domain.sessions import (
    LEG_STATUSES,
    LEG_TRANSITIONS,
    SESSION_ACTIVE,
    SESSION_TERMINAL,
    SESSION_TRANSITIONS,
    LegKind,
    LegRequest,
    LegsMismatchError,
    LegStatus,
    SessionStatus,
    can_transition,
    check_legs,
    leg_transition,
    session_fee,
    session_transition,
)

SESSION_STATUSES = list(SessionStatus)
LEG_STATUS_LIST = list(LegStatus)


@given(st.lists(st.sampled_from(SESSION_STATUSES), max_size=12))
def test_session_walks_follow_drawn_edges_and_stop_at_a_terminal_status(targets: list[SessionStatus]) -> None:
    status = SessionStatus.OPEN
    for target in targets:
        if target in SESSION_TRANSITIONS.get(status, frozenset()):
            session_transition(status, target)
            status = target
        else:
            with pytest.raises(InvalidTransitionError):
                session_transition(status, target)
    if status in SESSION_TERMINAL:
        assert not any(can_transition(status, t) for t in SESSION_STATUSES)
    else:
        assert status in SESSION_ACTIVE


@given(st.sampled_from(list(LegKind)), st.lists(st.sampled_from(LEG_STATUS_LIST), max_size=10))
def test_leg_walks_stay_within_their_kinds_statuses_and_never_go_back(
    kind: LegKind, targets: list[LegStatus]
) -> None:
    status = LegStatus.PENDING
    seen = [status]
    for target in targets:
        if target in LEG_TRANSITIONS[kind].get(status, frozenset()):
            leg_transition(kind, status, target)
            status = target
            seen.append(status)
        else:
            with pytest.raises(InvalidTransitionError):
                leg_transition(kind, status, target)
    assert set(seen) <= LEG_STATUSES[kind]
    assert len(seen) == len(set(seen)), "a leg never returns to a status it left"
    assert len(seen) <= 3, "pending -> moved -> undone at most"


def test_every_active_session_can_end_in_cancelled_and_expired() -> None:
    for status in SESSION_ACTIVE:
        assert can_transition(status, SessionStatus.CANCELLED)
        assert can_transition(status, SessionStatus.EXPIRED)
    assert not can_transition(SessionStatus.OPEN, SessionStatus.COMPLETED)


@given(
    st.lists(st.integers(min_value=1, max_value=10**9), min_size=1, max_size=11),
    st.integers(min_value=-5, max_value=5),
)
def test_legs_must_sum_to_the_amount(amounts: list[int], error: int) -> None:
    legs = [LegRequest(LegKind.GIFT_CARD, a, f"GC-{i}") for i, a in enumerate(amounts[:-1])]
    legs.append(LegRequest(LegKind.CARD, amounts[-1], "tok"))
    total = sum(amounts) + error
    if error == 0:
        check_legs(total, legs)
    elif total > 0:
        with pytest.raises(LegsMismatchError):
            check_legs(total, legs)


def test_legs_rules_refuse_two_cards_a_repeated_gift_card_and_no_legs() -> None:
    card = LegRequest(LegKind.CARD, 50, "tok")
    with pytest.raises(InvalidInputError):
        check_legs(100, [card, card])
    gift = LegRequest(LegKind.GIFT_CARD, 50, "GC-1")
    with pytest.raises(InvalidInputError):
        check_legs(100, [gift, gift])
    with pytest.raises(InvalidInputError):
        check_legs(100, [])


@given(st.integers(min_value=1, max_value=10**15))
def test_the_fee_never_exceeds_the_amount(amount: int) -> None:
    assert 0 <= session_fee(amount) <= amount
