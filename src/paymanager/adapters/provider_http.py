"""The HTTP transport of the session providers' drivers (gift cards, card acquiring).

One place for the client, its timeouts and pool limits, the idempotency header, the mapping of
"cannot know" (connection refused, timeout, 5xx, 429) to `ProviderUnavailableError`, and logging
with the card number masked. The drivers only build requests and parse answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from paymanager.application.sessions.ports import ProviderUnavailableError
from paymanager.logging import get_logger

log = get_logger("paymanager.adapters.provider")

# Connections a driver keeps to its provider: bounds the calls in flight from one process.
CONNECTIONS_MAX = 100


@dataclass(frozen=True, slots=True)
class Answer:
    status_code: int
    body: dict[str, Any]


def mask(card: str) -> str:
    return ("*" * max(0, len(card) - 4)) + card[-4:]


class ProviderHttp:
    """A JSON-over-HTTP client for one provider."""

    def __init__(self, base_url: str, *, api_key: str | None, timeout_ms: int, auth_header: str) -> None:
        headers = {auth_header: api_key} if api_key else {}
        self._client = httpx.AsyncClient(
            base_url=base_url,
            headers=headers,
            timeout=httpx.Timeout(timeout_ms / 1000),
            limits=httpx.Limits(max_connections=CONNECTIONS_MAX, max_keepalive_connections=CONNECTIONS_MAX),
        )
        self._name = base_url

    async def request(
        self,
        method: str,
        path: str,
        *,
        json: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
        card: str | None = None,
    ) -> Answer:
        """The provider's answer (2xx or 4xx), or `ProviderUnavailableError` when it is unknown."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        content = orjson.dumps(json) if json is not None else None
        try:
            response = await self._client.request(
                method, path, content=content, headers={**(headers or {}), "Content-Type": "application/json"}
            )
        except httpx.HTTPError as exc:
            log.warning(
                "provider call failed", provider=self._name, path=path, card=mask(card) if card else None,
                error=type(exc).__name__,
            )  # fmt: skip
            raise ProviderUnavailableError(f"{method} {path}: {type(exc).__name__}") from exc
        if response.status_code >= 500 or response.status_code == 429:
            raise ProviderUnavailableError(f"{method} {path}: HTTP {response.status_code}")
        try:
            body = orjson.loads(response.content) if response.content else {}
        except orjson.JSONDecodeError as exc:
            raise ProviderUnavailableError(f"{method} {path}: the answer is not JSON") from exc
        if not isinstance(body, dict):
            raise ProviderUnavailableError(f"{method} {path}: the answer is not a JSON object")
        return Answer(response.status_code, body)

    async def close(self) -> None:
        await self._client.aclose()
