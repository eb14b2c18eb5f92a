"""The one error shape of the API, and the one place errors become HTTP responses.

    {"error": {"code": "...", "message": "...", "details": {...}}}

Client mistakes are 4xx with a stable `code`; a POST whose ledger work met transient conflicts on
every attempt is a 503 `ledger_busy` to retry; anything unexpected is logged with its traceback and
answered as a 500 `internal_error` without internals.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from paymanager.application.errors import (
    AccountReferenceTakenError,
    IdempotencyKeyMissingError,
    IdempotencyKeyReusedError,
    ServiceNameTakenError,
)
from paymanager.domain import errors as domain
from paymanager.ledger import LedgerConflictError
from paymanager.logging import get_logger

log = get_logger("paymanager.api")


class ApiError(Exception):
    """An error a client can act on; raised by routes and dependencies, rendered by the handler."""

    def __init__(self, status: int, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}


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
}


# How each domain failure is answered; a subclass takes the status of its nearest listed ancestor.
_DOMAIN_STATUS: dict[type[domain.DomainError], int] = {
    domain.NotFoundError: 404,
    IdempotencyKeyMissingError: 400,
    IdempotencyKeyReusedError: 409,
    AccountReferenceTakenError: 409,
    ServiceNameTakenError: 409,
    domain.ScopeRequiredError: 403,
    domain.InvalidTransitionError: 409,
    domain.IntentExpiredError: 409,
    domain.PolicyViolationError: 422,
    domain.InsufficientFundsError: 422,
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


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(domain.DomainError)
    async def _domain_error(_: Request, exc: domain.DomainError) -> JSONResponse:
        return JSONResponse(domain_error_body(exc), status_code=domain_status(exc))

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.code, exc.message, exc.details)

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
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _STATUS_CODES.get(exc.status_code, "http_error")
        return error_response(exc.status_code, code, str(exc.detail), headers=getattr(exc, "headers", None))

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

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", path=request.url.path, method=request.method)
        return error_response(500, "internal_error", "an unexpected error occurred; it has been logged")
