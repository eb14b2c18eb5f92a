"""The span of each HTTP request (TRACING_ENABLED only: `HttpMetricsMiddleware` opens it then).

A SERVER span, child of the caller's `traceparent` when it sends one, named by the route's template
(`POST /intents/{intent_id}/confirm`) so ids do not make names. The metrics middleware opens it
around the app and ends it before the access log line, with the status its one send wrapper saw,
so the line carries the trace id and a request passes through one wrapper, not two.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from starlette.types import Scope

from paymanager import tracing


def request_span(scope: Scope, method: str) -> AbstractContextManager[Any]:
    """The request's span, opened as the app starts to serve it (None inside when no SDK span)."""
    headers = {
        key.decode("latin-1"): value.decode("latin-1")
        for key, value in scope.get("headers", ())
        if key in (b"traceparent", b"tracestate")
    }
    return tracing.remote_span(method, headers, {"http.request.method": method}, server=True)


def describe_span(span: Any, method: str, route: str, status: int) -> None:
    """Name the span by its route template and record the status, once the response is known."""
    if span is None:
        return
    span.update_name(f"{method} {route}")
    span.set_attribute("http.route", route)
    span.set_attribute("http.response.status_code", status)
    if status >= 500:
        from opentelemetry.trace import Status, StatusCode

        span.set_status(Status(StatusCode.ERROR))
