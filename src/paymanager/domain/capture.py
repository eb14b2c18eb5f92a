"""Manual capture: how much of a hold a capture posts, and the fee that goes with it.

A manual intent's confirm holds its amount and fee; a capture posts `amount` (at most the held
amount; the whole of it when the merchant names none) and the channel's fee on that amount (never
more than the fee held, which was computed on the whole amount), and releases the rest of both.
"""

from __future__ import annotations

from dataclasses import dataclass

from paymanager.domain.channels import Channel
from paymanager.domain.errors import CaptureExceedsHoldError, InvalidAmountError


@dataclass(frozen=True, slots=True)
class Capture:
    """What a capture posts of a hold: `amount` of the amount leg and `fee` of the fee leg."""

    amount: int
    fee: int

    def __post_init__(self) -> None:
        assert self.amount > 0, "a capture posts a positive amount"
        assert self.fee >= 0, "a fee is never negative"


def capture_of(channel: Channel, *, held_amount: int, held_fee: int, wanted: int | None) -> Capture:
    """The capture of `wanted` (None: all) of a hold of `held_amount` + `held_fee` on `channel`."""
    amount = held_amount if wanted is None else wanted
    if amount <= 0:
        raise InvalidAmountError("a capture's amount must be positive", {"amount": amount})
    if amount > held_amount:
        raise CaptureExceedsHoldError(
            f"at most {held_amount} can be captured", {"capturable": held_amount, "requested": amount}
        )
    if amount == held_amount:
        return Capture(amount, held_fee)
    return Capture(amount, min(channel.fee.fee_for(amount), held_fee))
