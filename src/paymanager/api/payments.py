"""Mounts the payments API on the app: routers, body limit, authentication docs, shared state."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from paymanager.api import (
    routes_accounts,
    routes_admin,
    routes_channels,
    routes_intents,
    routes_policies,
    routes_psp,
    routes_psp_webhooks,
    routes_refunds,
    routes_sessions,
    routes_webhooks,
)
from paymanager.api.auth import ServiceCache
from paymanager.api.body_limit import BodyLimitMiddleware
from paymanager.api.outage import DatabaseOutage
from paymanager.api.rate_limit import ServiceRateLimiter
from paymanager.api.schemas import ErrorOut
from paymanager.application.context import Payments
from paymanager.application.intents.event_hub import IntentEventHub
from paymanager.application.sessions.context import Sessions

SIGNING_DOC = """
## Authentication

Every route except `/livez`, `/readyz`, `/metrics` and the docs needs four headers:

| header | value |
|---|---|
| `X-Service-Id` | your service id (`paymanager services create NAME` prints it with the secret, once) |
| `X-Timestamp` | now, in unix seconds; accepted within ±300 s of the server's clock |
| `X-Nonce` | at least 16 fresh random bytes per request, as hex or base64url (at most 128 characters) |
| `X-Signature` | hex HMAC-SHA256, keyed with the UTF-8 bytes of your secret, of the canonical string |

The canonical string is five lines joined by `\\n`:

```
METHOD            e.g. POST
PATH?QUERY        the request target exactly as sent; `?QUERY` only when there is a query string
TIMESTAMP         the X-Timestamp value
NONCE             the X-Nonce value
SHA256(BODY)      lower-case hex SHA-256 of the raw body bytes (of the empty string for no body)
```

```python
import hashlib, hmac, secrets, time
ts, nonce = str(int(time.time())), secrets.token_hex(16)
canonical = f"POST\\n/intents\\n{ts}\\n{nonce}\\n{hashlib.sha256(body).hexdigest()}"
signature = hmac.new(secret.encode(), canonical.encode(), hashlib.sha256).hexdigest()
```

Test vector: secret `whsec_test`, `GET /intents?limit=5`, timestamp `1700000000`, nonce
`000102030405060708090a0b0c0d0e0f`, empty body give the signature
`f3b03c342b28accd45c2765d70b68c438b6fc683f5238a30647b3285865b4d7b`.

A nonce is accepted once per service inside the window: the same nonce again answers
`401 replayed`, while the same request with a fresh nonce is a new request (a script may poll
`GET /intents/{id}` as often as it likes). Requests without `X-Nonce` are still checked against the
older four-line string (no NONCE line) for one release, with a deprecation warning in the server's
log; for them the signature itself is what is accepted once.
Failures answer 401 with `error.code` one of `missing_header`, `bad_nonce`, `unknown_service`,
`stale_timestamp`, `bad_signature`, `replayed`.

From a shell: `paymanager call POST /intents '{"channel": ...}'` signs and sends a request
(service id and secret from `PAYMANAGER_SERVICE_ID` / `PAYMANAGER_SERVICE_SECRET`), and
`paymanager sign METHOD PATH [BODY]` prints the four headers for curl.

## Idempotency

Every POST needs an `Idempotency-Key` header (up to 255 characters; a UUID is a good key). The same
key with the same request returns the first response again with `Idempotent-Replayed: true`; the same
key with a different request answers 409 `idempotency_key_reused`. Keys are kept 24 hours at least.

## Errors

Every error has one shape: `{"error": {"code": "...", "message": "...", "details": {...}}}`.
"""


def _error(description: str) -> dict[str, Any]:
    return {"model": ErrorOut, "description": description}


# Every signed route can answer these, in the one error shape; the OpenAPI lists them so a client
# generated from it knows them.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: _error("Bad request (e.g. a missing or malformed Idempotency-Key)."),
    401: _error(
        "Not authenticated: missing_header, bad_nonce, stale_timestamp, unknown_service, "
        "bad_signature or replayed."
    ),
    403: _error("The route needs a scope the caller lacks."),
    404: _error("No such resource for this caller."),
    409: _error("Conflict: an invalid state transition or an Idempotency-Key reused with another request."),
    413: _error("The body is larger than API_MAX_BODY_BYTES."),
    422: _error("The request is not valid (the details name each field)."),
    429: _error("Too many requests; Retry-After says when to try again."),
    503: _error(
        "Temporarily unavailable (ledger_busy, queue_full, database_unavailable); "
        "Retry-After says when to try again. Nothing of the request happened."
    ),
}


def install_payments_api(app: FastAPI, payments: Payments, hub: IntentEventHub) -> None:
    """The payments routes, the body limit and the authentication docs, on `app`."""
    app.state.payments = payments
    app.state.database_outage = DatabaseOutage(payments.pool)
    app.state.event_hub = hub
    app.state.service_cache = ServiceCache(payments.settings.service_cache_ttl_ms)
    app.state.rate_limiter = ServiceRateLimiter(payments.settings.api_requests_per_sec_per_service)
    app.description = (app.description or "") + SIGNING_DOC
    app.add_middleware(BodyLimitMiddleware, max_bytes=payments.settings.api_max_body_bytes)
    for router in (
        routes_accounts.router,
        routes_intents.router,
        routes_policies.router,
        routes_channels.router,
        routes_psp.router,
        routes_psp_webhooks.router,
        routes_refunds.router,
        routes_webhooks.router,
    ):
        app.include_router(router, responses=ERROR_RESPONSES)
    for router in routes_admin.admin_routers():
        app.include_router(router, prefix="/admin", responses=ERROR_RESPONSES)


def install_sessions_api(app: FastAPI, sessions: Sessions) -> None:
    """The checkout-sessions routes (SESSIONS_ENABLED), beside the payments routes."""
    app.state.sessions = sessions
    app.include_router(routes_sessions.router, responses=ERROR_RESPONSES)
