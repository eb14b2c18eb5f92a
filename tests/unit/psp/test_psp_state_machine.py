"""The psp_tx state machine: the domain's table, the schema's trigger, and the masking of accounts."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from paymanager.adapters.psp.port import PayoutOrder
from paymanager.domain.errors import InvalidTransitionError
from paymanager.domain.psp import RANK, TERMINAL, TRANSITIONS, PspState, can_transition, mask, transition

states = st.sampled_from(list(PspState))


@given(st.lists(states, max_size=30))
def test_any_walk_the_machine_allows_only_moves_forward_and_ends_stay_ended(walk: list[PspState]) -> None:
    current = PspState.NEW
    for target in walk:
        if can_transition(current, target):
            assert RANK[target] > RANK[current] or current is PspState.CONFIRM_PENDING
            current = transition(current, target)
        else:
            with pytest.raises(InvalidTransitionError):
                transition(current, target)
    if current in TERMINAL:
        assert TRANSITIONS[current] == frozenset()


@given(states, states)
def test_no_state_goes_back_to_a_lower_rank(current: PspState, target: PspState) -> None:
    if can_transition(current, target):
        assert RANK[target] >= RANK[current]


def test_every_state_is_reachable_from_new() -> None:
    seen = {PspState.NEW}
    frontier = [PspState.NEW]
    while frontier:
        for nxt in TRANSITIONS[frontier.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                frontier.append(nxt)
    assert seen == set(PspState)


def test_account_numbers_are_masked_in_reprs() -> None:
    order = PayoutOrder(uuid.uuid4(), uuid.uuid4(), 100, "THB", "1234567890")
    assert "1234567890" not in repr(order)
    assert "7890" in repr(order)
    assert mask("12") == "**"
