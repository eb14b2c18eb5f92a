"""How much of a hold a capture posts: never more than held, the channel's fee on what is captured."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from paymanager.domain.capture import capture_of
from paymanager.domain.channels import DEFAULT_CHANNELS, Channel, ChannelName, default_registry
from paymanager.domain.errors import CaptureExceedsHoldError, InvalidAmountError

CAPTURING = [c for c in DEFAULT_CHANNELS if c.manual_capture]


def test_merchants_capture_on_internal_p2p_and_merchant_invoice_only() -> None:
    assert {c.name for c in CAPTURING} == {ChannelName.INTERNAL_P2P, ChannelName.MERCHANT_INVOICE}


@given(st.sampled_from(CAPTURING), st.integers(1, 10**12), st.data())
def test_a_capture_posts_at_most_the_hold_and_the_fee_on_what_it_captures(
    rule: Channel, held: int, data: st.DataObject
) -> None:
    held_fee = rule.fee.fee_for(held)
    wanted = data.draw(st.none() | st.integers(1, held))
    capture = capture_of(rule, held_amount=held, held_fee=held_fee, wanted=wanted)
    assert capture.amount == (held if wanted is None else wanted)
    assert 0 <= capture.fee <= held_fee
    assert capture.fee == rule.fee.fee_for(capture.amount)


def test_the_whole_hold_posts_the_whole_fee_and_more_is_refused_naming_what_may_be_captured() -> None:
    p2p = default_registry().get("internal-p2p")
    assert capture_of(p2p, held_amount=1_000, held_fee=5, wanted=None).fee == 5
    assert capture_of(p2p, held_amount=1_000, held_fee=5, wanted=600).fee == 3
    with pytest.raises(CaptureExceedsHoldError) as refused:
        capture_of(p2p, held_amount=1_000, held_fee=5, wanted=1_001)
    assert refused.value.details == {"capturable": 1_000, "requested": 1_001}
    with pytest.raises(InvalidAmountError):
        capture_of(p2p, held_amount=1_000, held_fee=5, wanted=0)
