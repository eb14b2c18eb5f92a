"""The HTTP transport of the session providers' drivers (gift cards, card acquiring).

One place for the client, its timeouts and pool limits, the idempotency header, the mapping of
"cannot know" (connection refused, timeout, 5xx, 429) to `ProviderUnavailableError`, and logging
with the card number masked. The drivers only build requests and parse answers.

The client is aiohttp: httpx's pool and transport cost about twenty times its CPU per request
(bench/http_client.py), which bounded the session actions a worker process could run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import aiohttp
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
        self._headers = {auth_header: api_key} if api_key else {}
        self._base_url = base_url.rstrip("/")
        # Per phase as httpx counted it (connecting, each read), not a total: a slow pool is not a slow peer.
        seconds = timeout_ms / 1000
        self._timeout = aiohttp.ClientTimeout(
            total=None, connect=seconds, sock_connect=seconds, sock_read=seconds
        )
        self._session: aiohttp.ClientSession | None = None
        self._name = base_url

    def _client(self) -> aiohttp.ClientSession:
        # Made on first use: a session belongs to the event loop that runs it.
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=CONNECTIONS_MAX),
                headers=self._headers,
                timeout=self._timeout,
                cookie_jar=aiohttp.DummyCookieJar(),
            )
        return self._session

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
        headers = {"Content-Type": "application/json"}
        if idempotency_key:
            headers["Idempotency-Key"] = idempotency_key
        content = orjson.dumps(json) if json is not None else None
        try:
            async with self._client().request(
                method, self._base_url + path, data=content, headers=headers
            ) as response:
                status, raw = response.status, await response.read()
        except (TimeoutError, aiohttp.ClientError) as exc:
            log.warning(
                "provider call failed", provider=self._name, path=path, card=mask(card) if card else None,
                error=type(exc).__name__,
            )  # fmt: skip
            raise ProviderUnavailableError(f"{method} {path}: {type(exc).__name__}") from exc
        if status >= 500 or status == 429:
            raise ProviderUnavailableError(f"{method} {path}: HTTP {status}")
        try:
            body = orjson.loads(raw) if raw else {}
        except orjson.JSONDecodeError as exc:
            raise ProviderUnavailableError(f"{method} {path}: the answer is not JSON") from exc
        if not isinstance(body, dict):
            raise ProviderUnavailableError(f"{method} {path}: the answer is not a JSON object")
        return Answer(status, body)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
