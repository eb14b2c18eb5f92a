"""What the three dialects share: an HTTP client with timeouts, credentials kept out of every repr
and log, and one mapping of transport faults to the port's errors.

The client is aiohttp: httpx's pool and transport cost about twenty times its CPU per request
(bench/http_client.py), and a payout is two PSP calls."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from paymanager.adapters.psp.port import PspError, PspRateLimitedError, PspUnavailableError
from paymanager.adapters.secret_box import Secret
from paymanager.logging import get_logger

log = get_logger("paymanager.psp.http")

DEFAULT_TIMEOUT_MS = 5_000
DEFAULT_RETRY_AFTER_MS = 1_000


@dataclass(frozen=True, slots=True)
class PspCredentials:
    """A PSP's configuration as stored sealed (`paymanager psp config set`): where it is, and secrets."""

    base_url: str
    api_key: Secret[str]
    webhook_secret: Secret[str] = field(default_factory=lambda: Secret(""))
    webhook_public_key: str = ""
    profile_id: str = "1"
    timeout_ms: int = DEFAULT_TIMEOUT_MS

    @classmethod
    def from_json(cls, raw: bytes) -> PspCredentials:
        """Parse the configuration file's JSON; a missing or wrongly typed field is a ValueError."""
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("a PSP configuration is a JSON object")
        base_url = data.get("base_url")
        api_key = data.get("api_key")
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError("base_url must be an http(s) URL")
        if not isinstance(api_key, str) or not api_key:
            raise ValueError("api_key must be a non-empty string")
        timeout_ms = data.get("timeout_ms", DEFAULT_TIMEOUT_MS)
        if not isinstance(timeout_ms, int) or not 10 <= timeout_ms <= 120_000:
            raise ValueError("timeout_ms must be an integer within [10, 120000]")
        return cls(
            base_url=base_url.rstrip("/"),
            api_key=Secret(api_key),
            webhook_secret=Secret(str(data.get("webhook_secret", ""))),
            webhook_public_key=str(data.get("webhook_public_key", "")),
            profile_id=str(data.get("profile_id", "1")),
            timeout_ms=timeout_ms,
        )


def retry_after_ms(headers: Mapping[str, str]) -> int:
    raw = headers.get("retry-after", "")
    try:
        return max(0, int(float(raw) * 1000))
    except ValueError:
        return DEFAULT_RETRY_AFTER_MS


class HttpPsp:
    """The HTTP side of a driver. `send` answers the decoded JSON of a 2xx or an expected 4xx, raises
    PspRateLimitedError on 429, PspUnavailableError on a 5xx or a transport fault."""

    name = "psp"

    def __init__(self, credentials: PspCredentials, *, max_connections: int = 200) -> None:
        self.credentials = credentials
        timeout = credentials.timeout_ms / 1000
        # Per phase, as before: a free pooled connection within the timeout, a new one within 2 s (a
        # PSP that cannot be reached fails fast), each read within the timeout.
        self._timeout = aiohttp.ClientTimeout(
            total=None, connect=timeout, sock_connect=min(timeout, 2.0), sock_read=timeout
        )
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_url={self.credentials.base_url!r}, api_key='***')"

    def _client(self) -> aiohttp.ClientSession:
        # Made on first use: a session belongs to the event loop that runs it.
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._max_connections),
                timeout=self._timeout,
                cookie_jar=aiohttp.DummyCookieJar(),
            )
        return self._session

    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.credentials.api_key.reveal()}"}

    async def send(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        expect: tuple[int, ...] = (),
        sends_money: bool = False,
    ) -> tuple[int, Any]:
        headers = self.auth_headers()
        data = None
        if json_body is not None:
            data = orjson.dumps(json_body)
            headers["Content-Type"] = "application/json"
        url = self.credentials.base_url + path
        try:
            async with self._client().request(method, url, data=data, headers=headers) as response:
                status, raw = response.status, await response.read()
                retry_after = retry_after_ms(response.headers) if status == 429 else 0
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
            raise PspUnavailableError(
                f"{self.name}: cannot connect ({type(exc).__name__})", ambiguous=False
            ) from exc
        except TimeoutError as exc:
            # Sent, no answer: the PSP may have acted on it.
            raise PspUnavailableError(f"{self.name}: no answer in time", ambiguous=sends_money) from exc
        except aiohttp.ClientError as exc:
            raise PspUnavailableError(f"{self.name}: {type(exc).__name__}", ambiguous=sends_money) from exc
        if status == 429:
            raise PspRateLimitedError(retry_after)
        if status >= 500:
            raise PspUnavailableError(f"{self.name}: HTTP {status}", ambiguous=sends_money)
        if not (200 <= status < 300 or status in expect):
            raise PspError(f"{self.name}: unexpected HTTP {status} on {method} {path}")
        try:
            body = json.loads(raw) if raw else None
        except ValueError as exc:
            raise PspUnavailableError(f"{self.name}: the answer is not JSON", ambiguous=sends_money) from exc
        return status, body

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
