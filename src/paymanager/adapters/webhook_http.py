"""The HTTP side of webhook deliveries: one pooled aiohttp session, a POST to the address the SSRF
guard checked (never a second DNS lookup), the endpoint's host kept in `Host` and in TLS's SNI and
certificate check.

aiohttp rather than httpx: a delivery's own work is a POST, and httpx's pool and transport cost
about twenty times aiohttp's CPU per request (bench/http_client.py; docs/BENCHMARKS.md), which
bounded the deliveries per second a worker process could make."""

from __future__ import annotations

import time

import aiohttp
from yarl import URL

from paymanager.application.webhooks.address_guard import CheckedUrl
from paymanager.application.webhooks.deliver import SendResult

# A receiver's answer is read up to this many bytes: only its status code matters.
RESPONSE_BYTES_MAX = 4_096


def _pinned_url(checked: CheckedUrl) -> str:
    host = f"[{checked.address}]" if ":" in checked.address else checked.address
    url = URL(checked.url)
    return str(url.with_host(host.strip("[]")).with_port(checked.port))


class HttpSender:
    def __init__(self, *, timeout_ms: int, connections_max: int) -> None:
        # Per phase (connecting, each read): a receiver that sends nothing for this long has hung.
        seconds = timeout_ms / 1000
        self._timeout = aiohttp.ClientTimeout(
            total=None, connect=seconds, sock_connect=seconds, sock_read=seconds
        )
        self._connections_max = connections_max
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        # Made on first use: a session belongs to the event loop that runs it.
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._connections_max),
                timeout=self._timeout,
                trust_env=False,
                cookie_jar=aiohttp.DummyCookieJar(),
            )
        return self._session

    async def send(self, checked: CheckedUrl, body: bytes, headers: dict[str, str]) -> SendResult:
        default_port = 443 if checked.scheme == "https" else 80
        host = f"[{checked.host}]" if ":" in checked.host else checked.host
        host_header = host if checked.port == default_port else f"{host}:{checked.port}"
        started = time.perf_counter()
        try:
            async with self._client().post(
                _pinned_url(checked),
                data=body,
                headers={**headers, "Host": host_header, "Content-Type": "application/json"},
                allow_redirects=False,  # a redirect could lead past the SSRF guard
                server_hostname=checked.host if checked.scheme == "https" else None,
            ) as response:
                await response.content.read(RESPONSE_BYTES_MAX)
                status = response.status
        except TimeoutError:
            return SendResult(None, "timeout", _ms(started))
        except aiohttp.ClientError as exc:
            return SendResult(None, f"connection failed: {type(exc).__name__}", _ms(started))
        return SendResult(status, None, _ms(started))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def _ms(started: float) -> int:
    return round((time.perf_counter() - started) * 1000)
