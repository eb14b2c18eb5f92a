"""Runs a POST under its Idempotency-Key (`application.idempotency.unit_of_work`), from HTTP.

This module turns the request into the unit of work's input and its outcome into a response; the
transaction itself (claim, work, stored outcome, commit, retries) belongs to the application layer.
"""

from __future__ import annotations

import orjson
from fastapi import Request
from fastapi.responses import Response

from paymanager.api.auth import post_signature, remember, replayed_error
from paymanager.api.errors import domain_error_body, domain_status, error_body
from paymanager.application.context import Payments
from paymanager.application.idempotency import keys
from paymanager.application.idempotency.unit_of_work import (
    SignatureReplayedError,
    SignedPost,
    Work,
)
from paymanager.application.idempotency.unit_of_work import (
    run_idempotent as run_once,
)
from paymanager.application.services.use_cases import ServiceIdentity
from paymanager.domain.errors import DomainError
from paymanager.logging import get_logger

log = get_logger("paymanager.api")

REPLAYED_HEADER = "Idempotent-Replayed"


def _refusal(exc: Exception) -> tuple[int, object]:
    if isinstance(exc, DomainError):
        return domain_status(exc), domain_error_body(exc)
    # The schema caught input the code should have refused first: still the client's input, so a
    # 422, but logged as the bug it is.
    log.error("the schema refused input the code accepted", error=str(exc))
    return 422, error_body("constraint_violation", "the request breaks a rule of the data model", {})


async def run_idempotent(request: Request, caller: ServiceIdentity, work: Work) -> Response:
    payments: Payments = request.app.state.payments
    used = post_signature(request)
    try:
        key = keys.check_key(request.headers.get("Idempotency-Key"))
    except DomainError:
        # The signature does not cover the key: spend it anyway, or the same signed request could be
        # sent again with a key added and run.
        async with payments.pool.acquire() as conn:
            await remember(conn, used)
        raise
    body = await request.body()
    claim = keys.KeyClaim(
        caller.id, key, keys.request_hash(request.method, request.url.path, body), payments.clock(),
        payments.settings.idempotency_key_ttl_sec,
    )  # fmt: skip
    try:
        outcome = await run_once(payments, SignedPost(claim, used.signature, used.expires_at), work, _refusal)
    except SignatureReplayedError:
        raise replayed_error() from None
    headers = {REPLAYED_HEADER: "true"} if outcome.replayed else None
    return Response(
        orjson.dumps(outcome.body), status_code=outcome.status_code, headers=headers,
        media_type="application/json",
    )  # fmt: skip
