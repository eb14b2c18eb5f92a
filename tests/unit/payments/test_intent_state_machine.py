"""The intent state machine: properties over random walks, and the table against the schema's trigger."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from paymanager.domain.errors import InvalidTransitionError
from paymanager.domain.intents import (
    TERMINAL,
    TRANSITIONS,
    IntentStatus,
    SettlementOutcome,
    can_transition,
    settlement_status,
    transition,
)

STATUSES = list(IntentStatus)
VERSIONS = Path(__file__).resolve().parents[3] / "src/paymanager/db/versions"


def _latest(definition: str) -> str:
    """The text of the newest migration that (re)defines `definition`."""
    found = [path for path in sorted(VERSIONS.glob("*.sql")) if definition in path.read_text()]
    assert found, definition
    return found[-1].read_text()


def _allowed(status: IntentStatus, target: IntentStatus, *, expires: bool, manual: bool) -> bool:
    """The edges as docs/state_machines.md draws them, written out apart from the code."""
    if target not in TRANSITIONS[status]:
        return False
    if status is IntentStatus.CREATED and target is IntentStatus.EXPIRED:
        return expires
    if target is IntentStatus.REQUIRES_CAPTURE:
        return manual
    if target is IntentStatus.CONFIRMED:
        return not manual
    return True


@given(st.lists(st.sampled_from(STATUSES), max_size=12), st.booleans(), st.booleans())
def test_random_walks_only_follow_drawn_edges_and_stop_at_terminal(
    targets: list[IntentStatus], expires: bool, manual: bool
) -> None:
    status = IntentStatus.CREATED
    for target in targets:
        if _allowed(status, target, expires=expires, manual=manual):
            status = transition(status, target, expires=expires, manual=manual)
        else:
            with pytest.raises(InvalidTransitionError):
                transition(status, target, expires=expires, manual=manual)
    if status in TERMINAL:
        assert all(not can_transition(status, t, expires=expires, manual=manual) for t in STATUSES)
    # A manual intent never passes through confirmed; an automatic one never awaits a capture.
    assert status is not (IntentStatus.CONFIRMED if manual else IntentStatus.REQUIRES_CAPTURE)


@given(st.sampled_from(STATUSES), st.sampled_from(STATUSES))
def test_a_refused_transition_names_both_states_and_the_allowed_ones(
    current: IntentStatus, target: IntentStatus
) -> None:
    if can_transition(current, target, expires=True):
        return
    with pytest.raises(InvalidTransitionError) as refused:
        transition(current, target, expires=True)
    assert refused.value.details["from"] == current.value
    assert refused.value.details["to"] == target.value
    assert set(refused.value.details["allowed"]) <= {s.value for s in TRANSITIONS[current]}


def test_only_expiring_channels_may_expire() -> None:
    assert can_transition(IntentStatus.CREATED, IntentStatus.EXPIRED, expires=True)
    assert not can_transition(IntentStatus.CREATED, IntentStatus.EXPIRED, expires=False)


def test_confirmed_cannot_go_back_to_created_nor_expire() -> None:
    assert not can_transition(IntentStatus.CONFIRMED, IntentStatus.CREATED, expires=True)
    assert not can_transition(IntentStatus.CONFIRMED, IntentStatus.EXPIRED, expires=True)


def test_an_uncaptured_hold_expires_on_any_channel_and_a_capture_settles_it() -> None:
    held = transition(IntentStatus.CREATED, IntentStatus.REQUIRES_CAPTURE, expires=False, manual=True)
    assert can_transition(held, IntentStatus.EXPIRED, expires=False, manual=True)
    assert can_transition(held, IntentStatus.SETTLED, expires=False, manual=True)
    assert can_transition(held, IntentStatus.CANCELLED, expires=False, manual=True)
    assert not can_transition(held, IntentStatus.CONFIRMED, expires=False, manual=True)
    with pytest.raises(InvalidTransitionError) as refused:
        transition(IntentStatus.CREATED, IntentStatus.CONFIRMED, expires=False, manual=True)
    assert "requires_capture" in refused.value.details["allowed"]


def test_settlement_outcome_maps_to_final_status() -> None:
    assert settlement_status(SettlementOutcome.POSTED, cancelled=False) is IntentStatus.SETTLED
    assert settlement_status(SettlementOutcome.VOIDED, cancelled=True) is IntentStatus.CANCELLED
    assert settlement_status(SettlementOutcome.VOIDED, cancelled=False) is IntentStatus.FAILED


def test_schema_trigger_draws_the_same_edges_as_the_code() -> None:
    sql = _latest("FUNCTION intent_check_transition()")
    edges: set[tuple[str, str]] = set()
    for source, targets in re.findall(r"OLD\.status = '(\w+)' AND NEW\.status IN \(([^)]*)\)", sql):
        edges |= {(source, t) for t in re.findall(r"'(\w+)'", targets)}
    code = {(s.value, t.value) for s, ts in TRANSITIONS.items() for t in ts}
    assert edges == code


def test_schema_check_lists_every_status() -> None:
    sql = _latest("CONSTRAINT intent_status_check")
    block = re.search(r"CONSTRAINT intent_status_check CHECK \(status IN \(([^)]*)\)", sql, re.S)
    assert block is not None
    assert set(re.findall(r"'(\w+)'", block.group(1))) == {s.value for s in IntentStatus}
