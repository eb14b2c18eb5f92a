"""The in-memory batch engine agrees with the reference model on random programs."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings

from paymanager.ledger import Transfer
from paymanager.ledger._batch import PENDING, BatchState
from tests.support.examples import examples
from tests.support.ledger_model import SECOND, Model
from tests.support.ledger_programs import base_accounts, funding, steps

START_NS = 1_700_000_000_000_000_000
# Clock moves are whole seconds plus a millisecond, so a post never lands exactly on an expiry.
STEP_NS = SECOND + 1_000_000


class EngineRunner:
    """Drives one BatchState across batches as the PostgreSQL ledger would (timestamps included)."""

    def __init__(self) -> None:
        self.state = BatchState()
        self.last = 0

    def timestamp(self, now: int, count: int) -> int:
        base = max(now, self.last + 1)
        self.last = base + count - 1
        return base

    def expire(self, now: int) -> int:
        due = [i for i, p in self.state.pending.items() if p.state == PENDING and 0 < p.expires_at <= now]
        for pending_id in due:
            self.state.expire(pending_id)
        return len(due)

    def balances(self) -> dict[int, tuple[int, int, int, int]]:
        return dict(self.state.balances)


def run(program: list[Any]) -> None:
    model, engine = Model(), EngineRunner()
    now = START_NS
    setup = base_accounts()
    assert [
        r.result for r in engine.state.create_accounts(setup, engine.timestamp(now, len(setup)))
    ] == model.create_accounts(setup, now)
    fund = funding()
    assert [
        r.result for r in engine.state.create_transfers(fund, engine.timestamp(now, 3))
    ] == model.create_transfers(fund, now)
    for step in program:
        if step[0] == "transfers":
            got = engine.state.create_transfers(step[1], engine.timestamp(now, len(step[1])))
            assert [r.result for r in got] == model.create_transfers(step[1], now), step[1]
        elif step[0] == "accounts":
            got_accounts = engine.state.create_accounts(step[1], engine.timestamp(now, len(step[1])))
            assert [r.result for r in got_accounts] == model.create_accounts(step[1], now), step[1]
        elif step[0] == "advance":
            now += step[1] * STEP_NS + 1_000_000
        else:
            assert engine.expire(now) == model.expire(now)
        assert engine.balances() == model.balances()
    debits = sum(b[0] + b[1] for b in engine.balances().values())
    credits = sum(b[2] + b[3] for b in engine.balances().values())
    assert debits == credits


@settings(max_examples=examples(150), deadline=None)
@given(steps())
def test_engine_agrees_with_the_model(program: list[Any]) -> None:
    run(program)


def test_requests_sharing_a_batch_keep_their_chains_apart() -> None:
    state = BatchState.from_accounts(base_accounts())
    linked = 1
    events = [
        Transfer(1, 1, 2, 5, ledger=1, code=1, flags=linked),  # request A ends with an open chain
        Transfer(2, 1, 2, 5, ledger=1, code=1, flags=linked),
        Transfer(3, 1, 2, 5, ledger=1, code=1),  # request B: a plain transfer
    ]
    results = state.create_transfers(events, 1, ends={1, 2})
    assert [r.result.name for r in results] == ["linked_event_failed", "linked_event_chain_open", "created"]
    assert state.balances[2] == (0, 0, 0, 5)
