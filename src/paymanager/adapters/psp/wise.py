"""Wise: a quote, then `POST /v1/transfers` with `customerTransactionId`, our idempotency key, sent
the SAME on every try so Wise returns the first transfer rather than making a second. Amounts are
decimals in major units on the wire (2 decimals for the currencies served), minor units here.
Webhooks are signed with Wise's private key and checked with its public key."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from paymanager.adapters.psp import signing
from paymanager.adapters.psp._http import HttpPsp
from paymanager.adapters.psp.ipps import _field, _json_object
from paymanager.adapters.psp.port import (
    InvalidWebhookError,
    PayoutOrder,
    PspError,
    QueryResult,
    TransferResult,
    WebhookEvent,
)
from paymanager.domain.psp import PspOutcome

STATES = {
    "outgoing_payment_sent": PspOutcome.COMPLETED,
    "incoming_payment_waiting": PspOutcome.PROCESSING,
    "processing": PspOutcome.PROCESSING,
    "funds_converted": PspOutcome.PROCESSING,
    "cancelled": PspOutcome.FAILED,
    "funds_refunded": PspOutcome.FAILED,
    "bounced_back": PspOutcome.FAILED,
}
SIGNATURE_HEADER = "x-signature-sha256"


def to_major(amount: int) -> str:
    return str(Decimal(amount) / 100)


def to_minor(value: Any) -> int:
    try:
        minor = Decimal(str(value)) * 100
    except InvalidOperation as exc:
        raise PspError(f"not an amount: {value!r}") from exc
    if minor != minor.to_integral_value():
        raise PspError(f"an amount with more than 2 decimals: {value!r}")
    return int(minor)


class WiseDriver(HttpPsp):
    name = "wise"
    resends_safely = True

    async def query(self, order: PayoutOrder) -> QueryResult:
        status, body = await self.send(
            "POST",
            f"/wise/v3/profiles/{self.credentials.profile_id}/quotes",
            json_body={"sourceCurrency": order.currency, "targetCurrency": order.currency,
                       "targetAmount": to_major(order.amount), "targetAccount": order.beneficiary},
            expect=(422,),
        )  # fmt: skip
        if status == 422:
            return QueryResult(False, reason=str(_field(body, "errors")))
        return QueryResult(True, query_ref=str(_field(body, "id")))

    async def transfer(self, order: PayoutOrder) -> TransferResult:
        _, body = await self.send(
            "POST",
            "/wise/v1/transfers",
            json_body={"targetAccount": order.beneficiary, "quoteUuid": order.query_ref,
                       "customerTransactionId": str(order.idempotency_key)},
            sends_money=True,
        )  # fmt: skip
        return _result(body)

    async def inquire(self, order: PayoutOrder) -> TransferResult:
        status, body = await self.send(
            "GET", f"/wise/v1/transfers?customerTransactionId={order.idempotency_key}", expect=(404,)
        )
        if status == 404:
            return TransferResult(PspOutcome.NOT_FOUND)
        return _result(body)

    async def partner_balance(self, currency: str) -> int:
        _, body = await self.send(
            "GET", f"/wise/v4/profiles/{self.credentials.profile_id}/balances?types=STANDARD"
        )
        for entry in body or []:
            if entry.get("currency") == currency:
                return to_minor(entry["amount"]["value"])
        return 0

    def verify_webhook(self, headers: Mapping[str, str], body: bytes) -> WebhookEvent:
        signature = {k.lower(): v for k, v in headers.items()}.get(SIGNATURE_HEADER, "")
        if not signing.check_rsa(self.credentials.webhook_public_key, body, signature):
            raise InvalidWebhookError("the Wise signature does not verify")
        data = _json_object(body)
        try:
            resource = data["data"]
            return WebhookEvent(
                event_id=str(data["event_id"]),
                reference=str(resource["customerTransactionId"]),
                outcome=STATES.get(str(resource["current_state"]), PspOutcome.UNKNOWN),
                amount=to_minor(resource["amount"]),
                psp_reference=str(resource.get("id") or "") or None,
            )
        except (KeyError, TypeError, ValueError, PspError) as exc:
            raise InvalidWebhookError(f"the Wise webhook lacks a field: {exc}") from exc


def _result(body: Any) -> TransferResult:
    state = str(_field(body, "status"))
    outcome = STATES.get(state, PspOutcome.UNKNOWN)
    reason = None if outcome is PspOutcome.COMPLETED else state
    return TransferResult(outcome, reference=str(body.get("id") or "") or None, reason=reason)
