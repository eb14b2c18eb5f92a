"""The HTTP side of webhook deliveries: one pooled httpx client, a POST to the address the SSRF guard
checked (never a second DNS lookup), the endpoint's host kept in `Host` and in TLS's SNI and
certificate check."""

from __future__ import annotations

import time

import httpx

from paymanager.application.webhooks.address_guard import CheckedUrl
from paymanager.application.webhooks.deliver import SendResult

# A receiver's answer is read up to this many bytes: only its status code matters.
RESPONSE_BYTES_MAX = 4_096


def _pinned_url(checked: CheckedUrl) -> httpx.URL:
    url = httpx.URL(checked.url)
    host = f"[{checked.address}]" if ":" in checked.address else checked.address
    return url.copy_with(host=host.strip("[]"), port=checked.port)


class HttpxSender:
    def __init__(self, *, timeout_ms: int, connections_max: int) -> None:
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_ms / 1000),
            limits=httpx.Limits(max_connections=connections_max, max_keepalive_connections=connections_max),
            follow_redirects=False,  # a redirect could lead past the SSRF guard
            trust_env=False,
        )

    async def send(self, checked: CheckedUrl, body: bytes, headers: dict[str, str]) -> SendResult:
        default_port = 443 if checked.scheme == "https" else 80
        host = f"[{checked.host}]" if ":" in checked.host else checked.host
        host_header = host if checked.port == default_port else f"{host}:{checked.port}"
        request = self._client.build_request(
            "POST",
            _pinned_url(checked),
            content=body,
            headers={**headers, "Host": host_header, "Content-Type": "application/json"},
            extensions={"sni_hostname": checked.host} if checked.scheme == "https" else {},
        )
        started = time.perf_counter()
        try:
            response = await self._client.send(request, stream=True)
            try:
                async for _ in response.aiter_raw(RESPONSE_BYTES_MAX):
                    break
            finally:
                await response.aclose()
        except httpx.TimeoutException:
            return SendResult(None, "timeout", _ms(started))
        except httpx.HTTPError as exc:
            return SendResult(None, f"connection failed: {type(exc).__name__}", _ms(started))
        return SendResult(response.status_code, None, _ms(started))

    async def close(self) -> None:
        await self._client.aclose()


def _ms(started: float) -> int:
    return round((time.perf_counter() - started) * 1000)
