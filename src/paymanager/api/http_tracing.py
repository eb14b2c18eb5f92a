"""The span of each HTTP request (TRACING_ENABLED only: `create_app` adds this middleware then).

A SERVER span, child of the caller's `traceparent` when it sends one, named by the route's template
(`POST /intents/{intent_id}/confirm`) so ids do not make names; the access log line is written
inside it (this middleware is outside HttpMetricsMiddleware), so it carries the trace id.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from paymanager import tracing
from paymanager.api.http_metrics import route_template


class HttpTracingMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method = str(scope.get("method", ""))
        headers = {
            key.decode("latin-1"): value.decode("latin-1")
            for key, value in scope.get("headers", ())
            if key in (b"traceparent", b"tracestate")
        }
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        with tracing.remote_span(f"{method}", headers, {"http.request.method": method}, server=True) as span:
            try:
                await self.app(scope, receive, send_status)
            finally:
                if span is not None:
                    route = route_template(scope)
                    span.update_name(f"{method} {route}")
                    span.set_attribute("http.route", route)
                    span.set_attribute("http.response.status_code", status)
                    if status >= 500:
                        from opentelemetry.trace import Status, StatusCode

                        span.set_status(Status(StatusCode.ERROR))
