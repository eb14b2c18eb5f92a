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
MIGRATION = Path(__file__).resolve().parents[3] / "src/paymanager/db/versions/0300_payments.sql"


@given(st.lists(st.sampled_from(STATUSES), max_size=12), st.booleans())
def test_random_walks_only_follow_drawn_edges_and_stop_at_terminal(
    targets: list[IntentStatus], expires: bool
) -> None:
    status = IntentStatus.CREATED
    for target in targets:
        allowed = target in TRANSITIONS[status] and (target is not IntentStatus.EXPIRED or expires)
        if allowed:
            status = transition(status, target, expires=expires)
        else:
            with pytest.raises(InvalidTransitionError):
                transition(status, target, expires=expires)
    if status in TERMINAL:
        assert all(not can_transition(status, t, expires=expires) for t in STATUSES)


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


def test_settlement_outcome_maps_to_final_status() -> None:
    assert settlement_status(SettlementOutcome.POSTED, cancelled=False) is IntentStatus.SETTLED
    assert settlement_status(SettlementOutcome.VOIDED, cancelled=True) is IntentStatus.CANCELLED
    assert settlement_status(SettlementOutcome.VOIDED, cancelled=False) is IntentStatus.FAILED


def test_schema_trigger_draws_the_same_edges_as_the_code() -> None:
    sql = MIGRATION.read_text()
    edges: set[tuple[str, str]] = set()
    for source, targets in re.findall(r"OLD\.status = '(\w+)' AND NEW\.status IN \(([^)]*)\)", sql):
        edges |= {(source, t) for t in re.findall(r"'(\w+)'", targets)}
    code = {(s.value, t.value) for s, ts in TRANSITIONS.items() for t in ts}
    assert edges == code


def test_schema_check_lists_every_status() -> None:
    sql = MIGRATION.read_text()
    block = re.search(r"status\s+text NOT NULL DEFAULT 'created' CHECK \(status IN \(([^)]*)\)", sql, re.S)
    assert block is not None
    assert set(re.findall(r"'(\w+)'", block.group(1))) == {s.value for s in IntentStatus}
