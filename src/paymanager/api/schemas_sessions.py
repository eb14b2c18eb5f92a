"""Request and response bodies of the checkout-sessions API."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

import orjson
from pydantic import AwareDatetime, BaseModel, Field, StrictInt, field_validator

from paymanager.api.schemas import METADATA_BYTES_MAX, Amount, CurrencyCode, _finite_numbers, _no_nul, _Strict
from paymanager.domain.sessions import CARD_REFERENCE_CHARS_MAX, GIFT_LEGS_MAX

CardText = Annotated[
    str, Field(min_length=1, max_length=CARD_REFERENCE_CHARS_MAX, pattern=r"^[A-Za-z0-9_.:-]+$")
]


class LegIn(_Strict):
    kind: Literal["gift_card", "card"] = Field(description="gift_card: a Titreo card; card: the card leg.")
    amount: Amount
    card: CardText = Field(description="The gift card's number, or the card's token at the acquirer.")


class SessionCreate(_Strict):
    merchant_account_id: uuid.UUID = Field(
        description="A merchant account of yours, in the session's currency."
    )
    amount: Amount
    currency: CurrencyCode
    legs: list[LegIn] = Field(
        min_length=1,
        max_length=GIFT_LEGS_MAX + 1,
        description="Zero or more gift-card legs and at most one card leg; their amounts sum to `amount`.",
    )
    expires_at: AwareDatetime | None = Field(default=None, description="When the session expires.")
    ttl_sec: StrictInt | None = Field(
        default=None, ge=1, description="Or: seconds from now until it expires."
    )
    metadata: dict[str, Any] = Field(
        default_factory=dict, description=f"At most {METADATA_BYTES_MAX} bytes as JSON."
    )

    @field_validator("metadata")
    @classmethod
    def _small(cls, value: dict[str, Any]) -> dict[str, Any]:
        _no_nul(value)
        _finite_numbers(value, "metadata")
        try:
            encoded = orjson.dumps(value)
        except orjson.JSONEncodeError as exc:
            raise ValueError(f"metadata cannot be stored: {exc}") from None
        if len(encoded) > METADATA_BYTES_MAX:
            raise ValueError(f"metadata must be at most {METADATA_BYTES_MAX} bytes as JSON")
        return value


class LegOut(BaseModel):
    id: str
    kind: str
    status: str
    amount: int
    card: str
    failure_reason: str | None


class SessionOut(BaseModel):
    id: str
    object: Literal["checkout_session"]
    status: str
    merchant_account_id: str
    amount: int
    fee: int
    currency: str
    version: int
    failure_reason: str | None
    metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    expires_at: datetime
    confirmed_at: datetime | None
    finished_at: datetime | None
    legs: list[LegOut]
