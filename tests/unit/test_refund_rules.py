"""Refund rules: the state machine (code against the schema's trigger) and the fee per channel."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from paymanager.domain.channels import ChannelName
from paymanager.domain.refunds import TERMINAL, RefundStatus, can_move, fee_to_refund, refundable

MIGRATION = Path(__file__).resolve().parents[2] / "src/paymanager/db/versions/0500_webhooks.sql"


def test_the_states_are_the_schemas() -> None:
    text = MIGRATION.read_text()
    assert "CHECK (status IN ('pending', 'succeeded', 'failed'))" in text
    assert {s.value for s in RefundStatus} == {"pending", "succeeded", "failed"}


@given(st.lists(st.sampled_from(list(RefundStatus)), max_size=10))
def test_a_refund_ends_once_and_stays_ended(moves: list[RefundStatus]) -> None:
    state = RefundStatus.PENDING
    for target in moves:
        if can_move(state, target):
            assert state is RefundStatus.PENDING
            state = target
        elif state in TERMINAL:
            assert not can_move(state, target)
    assert not can_move(state, RefundStatus.PENDING)


@given(
    amount=st.integers(1, 10**9),
    fee=st.integers(0, 10**7),
    cuts=st.lists(st.integers(1, 10**9), min_size=1, max_size=20),
)
def test_invoice_fee_refunds_never_exceed_the_fee_and_a_full_refund_returns_it_all(
    amount: int, fee: int, cuts: list[int]
) -> None:
    refunded = 0
    fee_back = 0
    for cut in cuts:
        part = min(cut, amount - refunded)
        if part <= 0:
            break
        back = fee_to_refund(
            ChannelName.MERCHANT_INVOICE, amount=amount, fee=fee, refunded_before=refunded, refund=part
        )
        assert back >= 0
        refunded += part
        fee_back += back
        assert fee_back <= fee
    rest = amount - refunded
    if rest:
        fee_back += fee_to_refund(
            ChannelName.MERCHANT_INVOICE, amount=amount, fee=fee, refunded_before=refunded, refund=rest
        )
    assert fee_back == fee


@given(amount=st.integers(1, 10**9), fee=st.integers(0, 10**7), part=st.integers(1, 10**9))
def test_p2p_keeps_its_fee(amount: int, fee: int, part: int) -> None:
    part = min(part, amount)
    assert (
        fee_to_refund(ChannelName.INTERNAL_P2P, amount=amount, fee=fee, refunded_before=0, refund=part) == 0
    )


@given(settled=st.integers(0, 10**12), refunded=st.integers(0, 10**12))
def test_refundable_is_never_negative(settled: int, refunded: int) -> None:
    left = refundable(settled, refunded)
    assert left >= 0
    assert left == max(0, settled - refunded)
