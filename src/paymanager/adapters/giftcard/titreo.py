"""The gift-card driver in the Titreo dialect: balance, debit, cancel.

Wire format (served by `paymanager.sandbox.giftcard`):

    GET  /v1/cards/{card}/balance                 -> 200 {"card", "balance", "currency"} | 404
    POST /v1/debits          Idempotency-Key: K   {"card", "amount", "currency"}
                                                  -> 201 {"debit_id", "status": "captured", ...}
                                                  -> 200 the same, for a repeat of K
                                                  -> 402 {"error": "insufficient_balance"}
                                                  -> 404 {"error": "card_not_found"}
                                                  -> 409 {"error": "debit_cancelled"} (K was cancelled first)
    POST /v1/debits/{K}/cancel                    -> 200 {"status": "cancelled", "debit_found": bool}

Authentication: the `X-Titreo-Key` header. A cancel names the debit by its idempotency key, so a
debit whose answer was lost can be cancelled all the same, and one still in flight is refused.
"""

from __future__ import annotations

from urllib.parse import quote

from paymanager.adapters.provider_http import ProviderHttp
from paymanager.application.sessions.ports import Approved, Declined, GiftCardBalance, Outcome

AUTH_HEADER = "X-Titreo-Key"


def _declined(body: dict[str, object], fallback: str) -> Declined:
    return Declined(str(body.get("error", fallback)), str(body.get("message", "")))


class TitreoGiftCards:
    """`GiftCardProvider` over Titreo's HTTP API."""

    def __init__(self, base_url: str, *, api_key: str | None, timeout_ms: int) -> None:
        self._http = ProviderHttp(base_url, api_key=api_key, timeout_ms=timeout_ms, auth_header=AUTH_HEADER)

    async def balance(self, card: str) -> GiftCardBalance | Declined:
        answer = await self._http.request("GET", f"/v1/cards/{quote(card, safe='')}/balance", card=card)
        if answer.status_code != 200:
            return _declined(answer.body, "card_not_found")
        return GiftCardBalance(card, int(answer.body["balance"]), str(answer.body["currency"]))

    async def debit(self, *, card: str, amount: int, currency: str, idempotency_key: str) -> Outcome:
        answer = await self._http.request(
            "POST", "/v1/debits", json={"card": card, "amount": amount, "currency": currency},
            idempotency_key=idempotency_key, card=card,
        )  # fmt: skip
        if answer.status_code in (200, 201):
            return Approved(str(answer.body["debit_id"]))
        return _declined(answer.body, f"http_{answer.status_code}")

    async def cancel(self, *, card: str, idempotency_key: str) -> Outcome:
        answer = await self._http.request(
            "POST", f"/v1/debits/{quote(idempotency_key, safe='')}/cancel", json={"card": card}, card=card
        )
        if answer.status_code == 200:
            return Approved(str(answer.body.get("debit_id") or idempotency_key))
        return _declined(answer.body, f"http_{answer.status_code}")

    async def close(self) -> None:
        await self._http.close()
