"""QP: a card-and-wallet PSP whose payouts are keyed by our `merchant_ref`. A payout posted again
with the same merchant_ref returns the first one (QP deduplicates), so after an error the driver's
caller may send it again; an inquiry is by merchant_ref. States: success, pending, declined."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from paymanager.adapters.psp import signing
from paymanager.adapters.psp._http import HttpPsp
from paymanager.adapters.psp.ipps import _field, _json_object
from paymanager.adapters.psp.port import (
    InvalidWebhookError,
    PayoutOrder,
    QueryResult,
    TransferResult,
    WebhookEvent,
)
from paymanager.domain.psp import PspOutcome

STATES = {"success": PspOutcome.COMPLETED, "pending": PspOutcome.PROCESSING, "declined": PspOutcome.FAILED}
SIGNATURE_HEADER = "x-qp-signature"
# A QP signature older than this is refused: a replayed webhook is not a new event.
SIGNATURE_TOLERANCE_S = 300


class QpDriver(HttpPsp):
    name = "qp"
    resends_safely = True

    async def query(self, order: PayoutOrder) -> QueryResult:
        status, body = await self.send(
            "POST",
            "/qp/api/payees/validate",
            json_body={"merchant_ref": str(order.reference), "account_no": order.beneficiary,
                       "amount_minor": order.amount, "ccy": order.currency},
            expect=(400,),
        )  # fmt: skip
        if status == 400:
            return QueryResult(False, reason=str(_field(body, "error")))
        return QueryResult(True, query_ref=str(_field(body, "validation_id")))

    async def transfer(self, order: PayoutOrder) -> TransferResult:
        _, body = await self.send(
            "POST",
            "/qp/api/payouts",
            json_body={"merchant_ref": str(order.reference), "validation_id": order.query_ref,
                       "amount_minor": order.amount, "ccy": order.currency},
            sends_money=True,
        )  # fmt: skip
        return _result(body)

    async def inquire(self, order: PayoutOrder) -> TransferResult:
        status, body = await self.send(
            "GET", f"/qp/api/payouts?merchant_ref={order.reference}", expect=(404,)
        )
        if status == 404:
            return TransferResult(PspOutcome.NOT_FOUND)
        return _result(body)

    async def partner_balance(self, currency: str) -> int:
        _, body = await self.send("GET", "/qp/api/wallet")
        for entry in _field(body, "balances"):
            if entry.get("ccy") == currency:
                return int(entry["available_minor"])
        return 0

    def verify_webhook(self, headers: Mapping[str, str], body: bytes) -> WebhookEvent:
        header = {k.lower(): v for k, v in headers.items()}.get(SIGNATURE_HEADER, "")
        if not signing.check_qp(self.credentials.webhook_secret.reveal(), body, header):
            raise InvalidWebhookError("the QP signature does not verify")
        stamp = dict(item.split("=", 1) for item in header.split(",") if "=" in item).get("t", "0")
        if abs(time.time() - int(stamp)) > SIGNATURE_TOLERANCE_S:
            raise InvalidWebhookError("the QP signature is too old")
        data = _json_object(body)
        try:
            return WebhookEvent(
                event_id=str(data["event_id"]),
                reference=str(data["merchant_ref"]),
                outcome=STATES.get(str(data["state"]), PspOutcome.UNKNOWN),
                amount=int(data["amount_minor"]),
                psp_reference=str(data.get("payout_id") or "") or None,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidWebhookError(f"the QP webhook lacks a field: {exc}") from exc


def _result(body: Any) -> TransferResult:
    state = str(_field(body, "state"))
    outcome = STATES.get(state, PspOutcome.UNKNOWN)
    reason = None if outcome is PspOutcome.COMPLETED else str(body.get("decline_reason") or state)
    return TransferResult(outcome, reference=str(body.get("payout_id") or "") or None, reason=reason)
