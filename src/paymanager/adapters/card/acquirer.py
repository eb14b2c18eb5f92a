"""The card-acquiring driver of session card legs: authorise (hold), capture, release.

Wire format (served by `paymanager.sandbox.card`); an authorisation is named by the caller's
idempotency key, so capture and release of an authorisation whose answer was lost still name it:

    POST /v1/authorizations  Idempotency-Key: K   {"token", "amount", "currency"}
                                                  -> 201 {"authorization_id": K, "status": "authorized"}
                                                  -> 200 the same, for a repeat of K
                                                  -> 402 {"error": "declined"}
                                                  -> 409 {"error": "authorization_released"}
                                                     (K was released before it arrived)
    POST /v1/authorizations/{K}/capture           {"amount"} -> 200 {"status": "captured"} | 409 | 404
    POST /v1/authorizations/{K}/release           -> 200 {"status": "released", "found": bool}

Authentication: the `X-Acquirer-Key` header. This driver sits beside the PSP drivers (adapters/psp)
and could become one of them: its port (`CardAcquirer`) is what sessions need from a PSP.
"""

from __future__ import annotations

from urllib.parse import quote

from paymanager.adapters.provider_http import ProviderHttp
from paymanager.application.sessions.ports import Approved, Declined, Outcome

AUTH_HEADER = "X-Acquirer-Key"


def _declined(body: dict[str, object], fallback: str) -> Declined:
    return Declined(str(body.get("error", fallback)), str(body.get("message", "")))


class HttpCardAcquirer:
    """`CardAcquirer` over the acquirer's HTTP API."""

    def __init__(self, base_url: str, *, api_key: str | None, timeout_ms: int) -> None:
        self._http = ProviderHttp(base_url, api_key=api_key, timeout_ms=timeout_ms, auth_header=AUTH_HEADER)

    async def authorize(self, *, token: str, amount: int, currency: str, idempotency_key: str) -> Outcome:
        answer = await self._http.request(
            "POST", "/v1/authorizations", json={"token": token, "amount": amount, "currency": currency},
            idempotency_key=idempotency_key, card=token,
        )  # fmt: skip
        if answer.status_code in (200, 201):
            return Approved(str(answer.body["authorization_id"]))
        return _declined(answer.body, f"http_{answer.status_code}")

    async def capture(self, *, authorization_key: str, amount: int) -> Outcome:
        answer = await self._http.request(
            "POST", f"/v1/authorizations/{quote(authorization_key, safe='')}/capture", json={"amount": amount}
        )
        if answer.status_code == 200:
            return Approved(authorization_key)
        return _declined(answer.body, f"http_{answer.status_code}")

    async def release(self, *, authorization_key: str) -> Outcome:
        answer = await self._http.request(
            "POST", f"/v1/authorizations/{quote(authorization_key, safe='')}/release", json={}
        )
        if answer.status_code == 200:
            return Approved(authorization_key)
        return _declined(answer.body, f"http_{answer.status_code}")

    async def close(self) -> None:
        await self._http.close()
