"""The one error shape of the API, and the one place errors become HTTP responses.

    {"error": {"code": "...", "message": "...", "details": {...}}}

Client mistakes are 4xx with a stable `code`. Faults a client can meet and retry are 503 with
`Retry-After`: `ledger_busy` (a POST's ledger work met transient conflicts on every attempt),
`queue_full` (the settlement queue is at its maximum depth; nothing of the request happened) and
`database_unavailable` (PostgreSQL cannot be reached; one log line per outage, not per request).
Anything unexpected is logged with its traceback and answered as a 500 `internal_error` without
internals.
"""

from __future__ import annotations

import time
from typing import Any

import asyncpg
import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import Counter
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from paymanager.api.outage import DATABASE_UNAVAILABLE, RETRY_AFTER_SEC, DatabaseOutage
from paymanager.application.errors import (
    AccountReferenceTakenError,
    IdempotencyKeyMissingError,
    IdempotencyKeyReusedError,
    IdempotencyOutcomeLostError,
    ServiceNameTakenError,
)
from paymanager.domain import errors as domain
from paymanager.domain.sessions import SessionExpiredError
from paymanager.jobs import QueueFullError
from paymanager.ledger import LedgerConflictError
from paymanager.logging import get_logger

log = get_logger("paymanager.api")


class ApiError(Exception):
    """An error a client can act on; raised by routes and dependencies, rendered by the handler."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}
        self.headers = headers


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}


def error_response(
    status: int,
    code: str,
    message: str,
    details: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    return JSONResponse(error_body(code, message, details), status_code=status, headers=headers)


_STATUS_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    429: "too_many_requests",
    503: "service_unavailable",
}


# How each domain failure is answered; a subclass takes the status of its nearest listed ancestor.
_DOMAIN_STATUS: dict[type[domain.DomainError], int] = {
    domain.NotFoundError: 404,
    IdempotencyKeyMissingError: 400,
    IdempotencyKeyReusedError: 409,
    IdempotencyOutcomeLostError: 410,
    AccountReferenceTakenError: 409,
    ServiceNameTakenError: 409,
    domain.ScopeRequiredError: 403,
    domain.InvalidTransitionError: 409,
    domain.IntentExpiredError: 409,
    SessionExpiredError: 409,
    domain.PolicyViolationError: 422,
    domain.RefundExceedsRefundableError: 422,
    domain.IntentNotSettledError: 409,
    domain.RefundNotRefundableError: 409,
    domain.RefundNotSupportedError: 409,
    domain.InsufficientFundsError: 422,
    domain.IntentNotCapturableError: 409,
    domain.CaptureExpiredError: 409,
    domain.CaptureExceedsHoldError: 422,
    domain.CaptureMethodNotAllowedError: 422,
    domain.PspNotServedError: 422,
    domain.DomainError: 422,
}


def domain_status(exc: domain.DomainError) -> int:
    """The HTTP status of a domain failure: that of its class or its nearest listed ancestor."""
    for cls in type(exc).__mro__:
        if cls in _DOMAIN_STATUS:
            return _DOMAIN_STATUS[cls]
    return 422


def domain_error_body(exc: domain.DomainError) -> dict[str, Any]:
    # Details may carry ids as database UUID objects; they are rendered as strings.
    details = orjson.loads(orjson.dumps(exc.details, default=str))
    return error_body(exc.code, exc.message, details)


QUEUE_FULL_RETRY_AFTER_SEC = 5
QUEUE_FULL_LOG_INTERVAL_SEC = 10.0


class _QueueFullLog:
    """One warning per queue per interval while confirms are refused, not one per request."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}
        self._refused: dict[str, int] = {}

    def refused(self, queue: str) -> None:
        now = time.monotonic()
        self._refused[queue] = self._refused.get(queue, 0) + 1
        if now - self._last.get(queue, -QUEUE_FULL_LOG_INTERVAL_SEC) >= QUEUE_FULL_LOG_INTERVAL_SEC:
            log.warning("queue full: refusing enqueues", queue=queue, refused=self._refused.pop(queue))
            self._last[queue] = now
        ENQUEUE_REFUSED.labels(queue=queue).inc()


ENQUEUE_REFUSED = Counter(
    "paymanager_enqueue_refused_total", "Requests answered 503 queue_full, by queue.", ["queue"]
)
_QUEUE_FULL_LOG = _QueueFullLog()


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def allowed_methods(request: Request) -> list[str]:
    """Every method some route serves at this path. Starlette's own 405 names only the methods of
    the first route whose path matched, while FastAPI declares one route per method."""
    allowed = []
    for method in _METHODS:
        scope = {**request.scope, "method": method}
        if any(route.matches(scope)[0] == Match.FULL for route in request.app.router.routes):
            allowed.append(method)
    return allowed


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(domain.DomainError)
    async def _domain_error(_: Request, exc: domain.DomainError) -> JSONResponse:
        return JSONResponse(domain_error_body(exc), status_code=domain_status(exc))

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.code, exc.message, exc.details, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [
            {
                "loc": [str(part) for part in err.get("loc", ())],
                "msg": str(err.get("msg", "")),
                "type": str(err.get("type", "")),
            }
            for err in exc.errors()
        ]
        return error_response(422, "validation_error", "the request is not valid", {"errors": problems})

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _STATUS_CODES.get(exc.status_code, "http_error")
        headers = getattr(exc, "headers", None)
        if exc.status_code == 405:
            headers = {**(headers or {}), "Allow": ", ".join(allowed_methods(request))}
        return error_response(exc.status_code, code, str(exc.detail), headers=headers)

    @app.exception_handler(LedgerConflictError)
    async def _ledger_busy(request: Request, exc: LedgerConflictError) -> JSONResponse:
        # A POST ran into transient ledger conflicts on every attempt (run_idempotent's budget):
        # nothing of it committed, so the same request with the same Idempotency-Key is safe to send
        # again. Busy, not broken: a 503 the client can retry, not a 500.
        log.warning("ledger conflicts on every attempt", path=request.url.path, error=str(exc))
        return error_response(
            503, "ledger_busy", "the ledger met conflicting concurrent work; send the request again",
            headers={"Retry-After": "1"},
        )  # fmt: skip

    @app.exception_handler(QueueFullError)
    async def _queue_full(_: Request, exc: QueueFullError) -> JSONResponse:
        # The work's transaction rolled back whole (no hold, no job): safe to send again later.
        _QUEUE_FULL_LOG.refused(exc.queue)
        return error_response(
            503, "queue_full", "the settlement queue is full; send the request again later",
            {"queue": exc.queue}, headers={"Retry-After": str(QUEUE_FULL_RETRY_AFTER_SEC)},
        )  # fmt: skip

    for unavailable in DATABASE_UNAVAILABLE:

        @app.exception_handler(unavailable)
        async def _database_unavailable(request: Request, exc: Exception) -> JSONResponse:
            outage: DatabaseOutage | None = getattr(request.app.state, "database_outage", None)
            if outage is not None:
                outage.observed(exc)
            return error_response(
                503, "database_unavailable", "the database cannot be reached; send the request again",
                headers={"Retry-After": str(RETRY_AFTER_SEC)},
            )  # fmt: skip

    @app.exception_handler(asyncpg.DataError)
    async def _data_error(request: Request, exc: asyncpg.DataError) -> JSONResponse:
        # SQLSTATE class 22 (a NUL byte in text, a number past its column's range, ...): a value the
        # client sent that the route's own validation let through. Answered 422, logged as a gap to
        # close in that route's schema; the transaction rolled back, so nothing was written.
        log.warning("value refused by the database", path=request.url.path, sqlstate=exc.sqlstate)
        return error_response(
            422, "invalid_value", "a value in the request cannot be stored or compared",
            {"reason": type(exc).__name__},
        )  # fmt: skip

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", path=request.url.path, method=request.method)
        return error_response(500, "internal_error", "an unexpected error occurred; it has been logged")
