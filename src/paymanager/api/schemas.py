"""Request and response bodies of the payments API, with the limits every field obeys."""

from __future__ import annotations

import math
import uuid
from typing import Annotated, Any, Literal

import orjson
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictInt, field_validator

from paymanager.domain.channels import ChannelName
from paymanager.domain.intents import CaptureMethod, IntentStatus
from paymanager.domain.money import CURRENCIES, MAX_AMOUNT_MINOR

METADATA_BYTES_MAX = 4_096

Amount = Annotated[StrictInt, Field(gt=0, le=MAX_AMOUNT_MINOR, description="Minor units (cents, satang).")]
# The schema lists the supported codes; a code outside them is refused by the domain with 422
# `unknown_currency`, which names the supported ones.
CurrencyCode = Annotated[
    str,
    Field(
        pattern=r"^[A-Z]{3}$",
        description="ISO 4217 code of a supported currency, e.g. THB.",
        json_schema_extra={"enum": sorted(CURRENCIES)},
    ),
]


def _finite_numbers(value: Any, path: str) -> None:
    """Refuse numbers JSON cannot carry faithfully: NaN and the infinities (Python's parser accepts
    `NaN`, `Infinity` and turns `1e400` into infinity; stored as JSON they would silently become null)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(
            f"{path} must be a finite number (NaN, Infinity and out-of-range numbers are refused)"
        )
    if isinstance(value, dict):
        for key, item in value.items():
            _finite_numbers(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _finite_numbers(item, f"{path}[{index}]")


def _no_nul(value: Any) -> Any:
    """Text PostgreSQL can store: no NUL characters and no lone surrogates (not UTF-8); refused as bad
    input here rather than failing later in the driver."""
    if isinstance(value, str):
        if "\x00" in value:
            raise ValueError("text must not contain NUL characters")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("text must be valid Unicode (no lone surrogates)") from None
    if isinstance(value, dict):
        for key, item in value.items():
            _no_nul(key)
            _no_nul(item)
    if isinstance(value, list):
        for item in value:
            _no_nul(item)
    return value


Text = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_no_nul)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AccountCreate(_Strict):
    kind: Literal["user", "merchant"]
    currency: CurrencyCode
    reference: Text | None = Field(
        default=None, description="Your own id for the account, unique per service."
    )


class AccountOut(BaseModel):
    id: str
    ledger_account_id: str = Field(
        description="The account's id in the ledger (a decimal u128): `paymanager ledger balance` takes it, "
        "or `id`."
    )
    kind: str
    currency: str
    name: str | None
    reference: str | None
    owner_service_id: str | None
    created_at: str


class BalanceOut(BaseModel):
    account_id: str
    ledger_account_id: str = Field(description="The account's id in the ledger (a decimal u128).")
    currency: str
    posted: int = Field(description="Settled balance.")
    pending: int = Field(description="Net of holds not yet settled (incoming minus outgoing).")
    available: int = Field(description="What the account may still spend: posted minus outgoing holds.")


class QuoteRequest(_Strict):
    channel: ChannelName
    amount: Amount
    currency: CurrencyCode


class QuoteOut(BaseModel):
    channel: str
    currency: str
    amount: int
    fee: int
    total: int


class IntentCreate(_Strict):
    channel: ChannelName
    amount: Amount
    currency: CurrencyCode
    payer_account_id: uuid.UUID | None = Field(
        default=None, description="Omit for admin-transfer (the funding account pays)."
    )
    payee_account_id: uuid.UUID | None = Field(
        default=None,
        description="Omit for the payouts ipps-, qp- and wise-transfer (their PSP's nostro account is paid).",
    )
    description: str | None = Field(default=None, max_length=500)
    metadata: dict[str, Any] = Field(
        default_factory=dict, description=f"At most {METADATA_BYTES_MAX} bytes as JSON."
    )
    expires_in_sec: StrictInt | None = Field(default=None, ge=1, description="merchant-invoice only.")
    capture_method: CaptureMethod = Field(
        default=CaptureMethod.AUTOMATIC,
        description="`automatic`: confirm settles the intent. `manual` (internal-p2p and merchant-invoice "
        "only; other channels answer 422 `capture_method_not_allowed`): confirm holds the funds and the "
        "intent waits in `requires_capture` until `POST /intents/{id}/capture` or its capture deadline "
        "(`settle_deadline_at`, CAPTURE_WINDOW_SEC after the confirm), when the hold is voided and the "
        "intent expires.",
    )

    @field_validator("description", "metadata")
    @classmethod
    def _text(cls, value: Any) -> Any:
        return _no_nul(value)

    @field_validator("metadata")
    @classmethod
    def _small(cls, value: dict[str, Any]) -> dict[str, Any]:
        _finite_numbers(value, "metadata")
        try:
            encoded = orjson.dumps(value)
        except orjson.JSONEncodeError as exc:
            # Integers beyond 64 bits or nesting deeper than 254 levels cannot be stored as JSON here.
            raise ValueError(f"metadata cannot be stored: {exc}") from None
        if len(encoded) > METADATA_BYTES_MAX:
            raise ValueError(f"metadata must be at most {METADATA_BYTES_MAX} bytes as JSON")
        return value


class PspView(BaseModel):
    psp: str
    state: str
    reference: str | None
    attempts: int
    last_error: str | None


class IntentOut(BaseModel):
    id: str
    channel: str
    status: IntentStatus
    awaiting: Literal["settlement", "psp", "capture"] | None = Field(
        description="What a confirmed intent waits for: the outbox settlement, (a payout) the PSP, or "
        "(requires_capture) the merchant's capture."
    )
    amount: int
    fee: int
    total: int
    currency: str
    payer_account_id: str
    payee_account_id: str
    description: str | None
    metadata: dict[str, Any]
    version: int
    failure_reason: str | None
    created_at: str
    updated_at: str
    expires_at: str | None
    confirmed_at: str | None
    settle_deadline_at: str | None = Field(
        description="A confirmed intent's settlement deadline; a manual one's capture deadline."
    )
    finished_at: str | None
    capture_method: CaptureMethod
    amount_captured: int | None = Field(
        description="What the capture posted of the held amount (manual intents, once captured); the "
        "rest was released."
    )
    fee_captured: int | None = Field(description="The fee posted with the capture (on the captured amount).")
    psp: PspView | None = Field(
        default=None, description="A payout's PSP transaction: its state and the PSP's reference."
    )


class CaptureRequest(_Strict):
    amount: Amount | None = Field(
        default=None, description="What to capture of the held amount; omitted: all of it."
    )


class IntentList(BaseModel):
    object: Literal["list"] = "list"
    data: list[IntentOut]
    has_more: bool
    next_cursor: str | None = Field(description="Pass as starting_after to get the next page.")


class HistoryList(BaseModel):
    object: Literal["list"] = "list"
    data: list[IntentOut]
    has_more: bool
    next_cursor: str | None


class PolicyPut(_Strict):
    channel: ChannelName
    service_id: Annotated[str, Field(max_length=40), AfterValidator(_no_nul)] | None = Field(
        default=None, description="Omit for a channel-wide policy."
    )
    min_amount: Amount | None = None
    max_amount: Amount | None = None
    daily_volume_per_account: Amount | None = None
    currencies: list[CurrencyCode] | None = Field(default=None, min_length=1, max_length=50)


class PolicyOut(BaseModel):
    id: str
    channel: str
    service_id: str | None
    min_amount: int | None
    max_amount: int | None
    daily_volume_per_account: int | None
    currencies: list[str] | None
    created_at: str
    updated_at: str


class PolicyList(BaseModel):
    object: Literal["list"] = "list"
    data: list[PolicyOut]


class ErrorDetail(BaseModel):
    code: str
    message: str
    details: dict[str, Any]


class ErrorOut(BaseModel):
    error: ErrorDetail


# --- webhooks and refunds ------------------------------------------------------------------------


class WebhookEndpointCreate(_Strict):
    url: str = Field(min_length=8, max_length=2048, description="http(s) URL that receives deliveries.")
    event_types: list[str] = Field(
        min_length=1, max_length=50, description="Event types to receive, e.g. intent.settled; '*' for all."
    )
    description: str | None = Field(default=None, max_length=500)

    @field_validator("url", "event_types", "description")
    @classmethod
    def _text(cls, value: Any) -> Any:
        return _no_nul(value)


class WebhookEndpointOut(BaseModel):
    id: str
    object: Literal["webhook_endpoint"]
    url: str
    event_types: list[str]
    description: str | None
    status: Literal["enabled", "disabled"]
    disabled_reason: str | None
    failing_since: str | None
    previous_secret_expires_at: str | None
    created_at: str
    secret: str | None = Field(default=None, description="Shown once: at creation and at rotation.")


class WebhookEndpointList(BaseModel):
    object: Literal["list"]
    data: list[WebhookEndpointOut]


class WebhookDeliveryOut(BaseModel):
    id: str
    object: Literal["webhook_delivery"]
    event_id: str
    event_type: str
    endpoint_id: str
    status: Literal["pending", "retrying", "succeeded", "dead", "cancelled"]
    attempts: int
    last_status_code: int | None
    last_error: str | None
    last_latency_ms: int | None
    last_attempt_at: str | None
    next_attempt_at: str | None
    created_at: str | None
    finished_at: str | None


class WebhookDeliveryList(BaseModel):
    object: Literal["list"]
    data: list[WebhookDeliveryOut]
    next_cursor: str | None


class RefundCreate(_Strict):
    amount: Amount | None = Field(default=None, description="Omit to refund all that is left.")
    reason: str | None = Field(default=None, max_length=500)

    @field_validator("reason")
    @classmethod
    def _text(cls, value: Any) -> Any:
        return _no_nul(value)


class RefundOut(BaseModel):
    id: str
    object: Literal["refund"]
    intent_id: str
    amount: int
    fee_refunded: int
    currency: str
    status: Literal["pending", "succeeded", "failed"]
    reason: str | None
    failure_reason: str | None
    created_at: str
    finished_at: str | None


class RefundList(BaseModel):
    object: Literal["list"]
    data: list[RefundOut]
