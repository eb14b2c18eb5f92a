"""Refunds: their states and the fee rule per channel.

pending -> succeeded | failed; nothing leaves a terminal state. A refund gives the payer back part or
all of a settled intent's amount (never more than the settled amount minus what earlier refunds not
failed already took). The fee, per channel:

- merchant-invoice: refunded pro rata, from the fee account, so a full refund returns the whole fee
  (the merchant's customer pays nothing for a sale undone);
- internal-p2p: kept (the transfer happened; its fee paid for it);
- service-transfer, admin-transfer: no fee to refund;
- ipps-transfer, qp-transfer, wise-transfer: not refundable (the money left through a PSP, and no
  PSP dialect offers a reversal of a completed transfer: docs/webhooks.md, "Refunds of payouts").
"""

from __future__ import annotations

from enum import StrEnum

from paymanager.domain.channels import ChannelName


class RefundStatus(StrEnum):
    PENDING = "pending"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


TERMINAL = frozenset({RefundStatus.SUCCEEDED, RefundStatus.FAILED})

TRANSITIONS: dict[RefundStatus, frozenset[RefundStatus]] = {
    RefundStatus.PENDING: frozenset({RefundStatus.SUCCEEDED, RefundStatus.FAILED}),
    RefundStatus.SUCCEEDED: frozenset(),
    RefundStatus.FAILED: frozenset(),
}

# Channels whose fee goes back with the amount, pro rata.
FEE_REFUNDED = frozenset({ChannelName.MERCHANT_INVOICE})
# Channels whose money left through a PSP: their refund would need a PSP reversal, which none offers.
PSP_CHANNELS = frozenset({ChannelName.IPPS_TRANSFER, ChannelName.QP_TRANSFER, ChannelName.WISE_TRANSFER})


def can_move(source: RefundStatus, target: RefundStatus) -> bool:
    return target in TRANSITIONS[source]


def refundable(settled: int, refunded: int) -> int:
    """What may still be refunded: the settled amount minus refunds not failed."""
    return max(0, settled - refunded)


def fee_to_refund(channel: str, *, amount: int, fee: int, refunded_before: int, refund: int) -> int:
    """The fee part of a refund of `refund` after `refunded_before` of `amount` was refunded.

    Pro rata on cumulative figures (floor of fee x refunded / amount, minus what earlier refunds
    took), so partial refunds never return more than the fee and a full refund returns all of it."""
    if ChannelName(channel) not in FEE_REFUNDED or fee == 0:
        return 0
    after = refunded_before + refund
    assert refund > 0, "a refund is positive"
    assert after <= amount, "a refund stays within the amount"
    return fee * after // amount - fee * refunded_before // amount
