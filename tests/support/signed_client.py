"""A test client that signs every request as DESIGN §7 says (also used by the e2e and chaos tests)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import orjson

from paymanager.api.signing import signed_headers


class SignedClient:
    """Signs requests for one service as DESIGN §7 says: every request with a fresh X-Nonce, unless
    a test passes the nonce (and timestamp) of an earlier request to replay it exactly."""

    def __init__(self, http: httpx.AsyncClient, service_id: str, secret: str) -> None:
        self.http = http
        self.service_id = service_id
        self.secret = secret
        # Unix seconds the requests are stamped with; a test that moves the server's clock sets it.
        self.clock: Callable[[], float] = time.time

    def headers_for(
        self, method: str, target: str, body: bytes, timestamp: int | None = None, nonce: str | None = None
    ) -> dict[str, str]:
        stamp = int(self.clock()) if timestamp is None else timestamp
        return signed_headers(self.service_id, self.secret.encode(), method, target, stamp, body, nonce)

    async def request(
        self,
        method: str,
        path: str,
        payload: Any = None,
        *,
        key: str | None = None,
        timestamp: int | None = None,
        nonce: str | None = None,
        extra_headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        body = b"" if payload is None else orjson.dumps(payload)
        headers = self.headers_for(method, path, body, timestamp, nonce)
        if body:
            headers["Content-Type"] = "application/json"
        if method == "POST":
            headers["Idempotency-Key"] = key or str(uuid.uuid4())
        headers.update(extra_headers or {})
        return await self.http.request(method, path, content=body, headers=headers)

    async def post(self, path: str, payload: Any = None, *, key: str | None = None) -> httpx.Response:
        return await self.request("POST", path, payload, key=key)

    async def get(self, path: str) -> httpx.Response:
        return await self.request("GET", path)

    # --- the steps most tests take ------------------------------------------------------------------

    async def open_account(self, kind: str = "user", currency: str = "THB") -> str:
        response = await self.post("/accounts", {"kind": kind, "currency": currency})
        assert response.status_code == 201, response.text
        return str(response.json()["id"])

    async def fund(self, account_id: str, amount: int, currency: str = "THB") -> dict[str, Any]:
        """admin-transfer into the account, confirmed; the caller must have the admin scope."""
        created = await self.post(
            "/intents",
            {
                "channel": "admin-transfer",
                "amount": amount,
                "currency": currency,
                "payee_account_id": account_id,
            },
        )
        assert created.status_code == 201, created.text
        confirmed = await self.post(f"/intents/{created.json()['id']}/confirm")
        assert confirmed.status_code == 200, confirmed.text
        result: dict[str, Any] = confirmed.json()
        return result

    async def balance(self, account_id: str) -> dict[str, Any]:
        response = await self.get(f"/accounts/{account_id}/balance")
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result
