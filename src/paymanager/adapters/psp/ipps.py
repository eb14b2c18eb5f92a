"""IPPS: an inquiry-based interbank rail. A transfer is identified by our `txnId` and is NEVER sent
twice: after a timeout or an error the driver's caller inquires by `txnId` until a final status.

Statuses are ISO 20022's: ACSC (settled), ACSP (accepted, in process), RJCT (rejected); any other
code is one the driver does not know, and a person must look. Amounts in minor units (satang).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from paymanager.adapters.psp import signing
from paymanager.adapters.psp._http import HttpPsp
from paymanager.adapters.psp.port import (
    InvalidWebhookError,
    PayoutOrder,
    PspError,
    QueryResult,
    TransferResult,
    WebhookEvent,
)
from paymanager.domain.psp import PspOutcome

STATUSES = {"ACSC": PspOutcome.COMPLETED, "ACSP": PspOutcome.PROCESSING, "RJCT": PspOutcome.FAILED}
SIGNATURE_HEADER = "x-ipps-signature"


class IppsDriver(HttpPsp):
    name = "ipps"
    resends_safely = False

    async def query(self, order: PayoutOrder) -> QueryResult:
        status, body = await self.send(
            "POST",
            "/ipps/v1/account-inquiry",
            json_body={"txnId": str(order.reference), "account": order.beneficiary, "amount": order.amount,
                       "currency": order.currency},
            expect=(422,),
        )  # fmt: skip
        if status == 422:
            return QueryResult(False, reason=str(_field(body, "code")))
        return QueryResult(True, query_ref=str(_field(body, "queryRef")))

    async def transfer(self, order: PayoutOrder) -> TransferResult:
        _, body = await self.send(
            "POST",
            "/ipps/v1/transfers",
            json_body={"txnId": str(order.reference), "queryRef": order.query_ref, "amount": order.amount,
                       "currency": order.currency},
            sends_money=True,
        )  # fmt: skip
        return _result(body)

    async def inquire(self, order: PayoutOrder) -> TransferResult:
        status, body = await self.send("GET", f"/ipps/v1/transfers/{order.reference}", expect=(404,))
        if status == 404:
            return TransferResult(PspOutcome.NOT_FOUND)
        return _result(body)

    async def partner_balance(self, currency: str) -> int:
        _, body = await self.send("GET", f"/ipps/v1/balance?currency={currency}")
        return int(_field(body, "balanceSatang"))

    def verify_webhook(self, headers: Mapping[str, str], body: bytes) -> WebhookEvent:
        signature = {k.lower(): v for k, v in headers.items()}.get(SIGNATURE_HEADER, "")
        if not signing.check_hmac(self.credentials.webhook_secret.reveal(), body, signature):
            raise InvalidWebhookError("the IPPS signature does not verify")
        data = _json_object(body)
        try:
            return WebhookEvent(
                event_id=str(data["eventId"]),
                reference=str(data["txnId"]),
                outcome=STATUSES.get(str(data["status"]), PspOutcome.UNKNOWN),
                amount=int(data["amount"]),
                psp_reference=str(data.get("transferRef") or "") or None,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidWebhookError(f"the IPPS webhook lacks a field: {exc}") from exc


def _result(body: Any) -> TransferResult:
    code = str(_field(body, "status"))
    outcome = STATUSES.get(code, PspOutcome.UNKNOWN)
    reason = str(body.get("reason") or code) if outcome is not PspOutcome.COMPLETED else None
    return TransferResult(outcome, reference=str(body.get("transferRef") or "") or None, reason=reason)


def _field(body: Any, name: str) -> Any:
    if not isinstance(body, dict) or name not in body:
        raise PspError(f"the PSP's answer lacks {name!r}")
    return body[name]


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise InvalidWebhookError("the webhook body is not JSON") from exc
    if not isinstance(data, dict):
        raise InvalidWebhookError("the webhook body is not a JSON object")
    return data
