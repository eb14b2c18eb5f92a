"""HTTP series and the access log: one histogram observation and one log line per request.

Labelled by the route's template (`/intents/{intent_id}`), never the raw path, so ids do not make
new series; a request no route matched is `unmatched`. The log line has the method, the template,
the status, the milliseconds and the calling service when one was authenticated: never a header,
a query string, a secret or a body.
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import Histogram
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from paymanager.logging import get_logger

log = get_logger("paymanager.access")

REQUEST_SECONDS = Histogram(
    "paymanager_http_request_duration_seconds",
    "HTTP requests by method, route template and status.",
    ["method", "route", "status"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
# Scrapes and probes: counted, not logged (a line per probe every few seconds drowns the rest).
QUIET_ROUTES = frozenset({"/metrics", "/livez", "/readyz"})


def route_template(scope: Scope) -> str:
    """The path template of the route that serves this request, or `unmatched`."""
    route = scope.get("route")
    path = getattr(route, "path_format", None) or getattr(route, "path", None)
    if isinstance(path, str):
        return path
    app = scope.get("app")
    router = getattr(app, "router", None)
    for candidate in getattr(router, "routes", ()):
        if candidate.matches(scope)[0] == Match.FULL:
            mount_path = getattr(candidate, "path_format", None) or getattr(candidate, "path", "")
            return str(mount_path) or "unmatched"
    return "unmatched"


class HttpMetricsMiddleware:
    """The histogram, the access log line and, with `traced`, the request's span (http_tracing):
    one send wrapper for the three, so a request pays for one layer however many of them are on."""

    def __init__(self, app: ASGIApp, traced: bool = False) -> None:
        self.app = app
        self.traced = traced

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        method = str(scope.get("method", ""))
        if not self.traced:
            try:
                await self.app(scope, receive, send_status)
            finally:
                _record(scope, method, route_template(scope), status, started)
            return
        # Imported here: with tracing off the request path has no tracing code at all.
        from paymanager.api import http_tracing

        with http_tracing.request_span(scope, method) as span:
            try:
                await self.app(scope, receive, send_status)
            finally:
                route = route_template(scope)
                http_tracing.describe_span(span, method, route, status)
                _record(scope, method, route, status, started)


def _record(scope: Scope, method: str, route: str, status: int, started: float) -> None:
    elapsed = time.perf_counter() - started
    REQUEST_SECONDS.labels(method, route, str(status)).observe(elapsed)
    if route in QUIET_ROUTES:
        return
    fields: dict[str, Any] = {
        "method": method,
        "route": route,
        "status": status,
        "ms": round(elapsed * 1000, 1),
    }
    state = scope.get("state")
    service = getattr(state.get("service"), "id", None) if isinstance(state, dict) else None
    if service is not None:
        fields["service_id"] = service
    log.info("request", **fields)
