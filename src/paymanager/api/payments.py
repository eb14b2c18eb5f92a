"""Mounts the payments API on the app: routers, body limit, authentication docs, shared state."""

from __future__ import annotations

from fastapi import FastAPI

from paymanager.api import routes_accounts, routes_channels, routes_intents, routes_policies
from paymanager.api.auth import ServiceCache
from paymanager.api.body_limit import BodyLimitMiddleware
from paymanager.application.context import Payments
from paymanager.application.intents.event_hub import IntentEventHub

SIGNING_DOC = """
## Authentication

Every route except `/livez`, `/readyz`, `/metrics` and the docs needs three headers:

| header | value |
|---|---|
| `X-Service-Id` | your service id (`paymanager services create NAME` prints it with the secret, once) |
| `X-Timestamp` | now, in unix seconds; accepted within ±300 s of the server's clock |
| `X-Signature` | hex HMAC-SHA256, keyed with the UTF-8 bytes of your secret, of the canonical string |

The canonical string is four lines joined by `\\n`:

```
METHOD            e.g. POST
PATH?QUERY        the request target exactly as sent; `?QUERY` only when there is a query string
TIMESTAMP         the X-Timestamp value
SHA256(BODY)      lower-case hex SHA-256 of the raw body bytes (of the empty string for no body)
```

```python
import hashlib, hmac, time
ts = str(int(time.time()))
canonical = f"POST\\n/intents\\n{ts}\\n{hashlib.sha256(body).hexdigest()}"
signature = hmac.new(secret.encode(), canonical.encode(), hashlib.sha256).hexdigest()
```

A signature is accepted once: the same signed request sent again inside the window answers
`401 replayed`, so repeat a request with a fresh timestamp (or vary its query/body).
Failures answer 401 with `error.code` one of `missing_header`, `unknown_service`,
`stale_timestamp`, `bad_signature`, `replayed`.

From a shell: `paymanager call POST /intents '{"channel": ...}'` signs and sends a request
(service id and secret from `PAYMANAGER_SERVICE_ID` / `PAYMANAGER_SERVICE_SECRET`), and
`paymanager sign METHOD PATH [BODY]` prints the three headers for curl.

## Idempotency

Every POST needs an `Idempotency-Key` header (up to 255 characters; a UUID is a good key). The same
key with the same request returns the first response again with `Idempotent-Replayed: true`; the same
key with a different request answers 409 `idempotency_key_reused`. Keys are kept 24 hours at least.

## Errors

Every error has one shape: `{"error": {"code": "...", "message": "...", "details": {...}}}`.
"""


def install_payments_api(app: FastAPI, payments: Payments, hub: IntentEventHub) -> None:
    """The payments routes, the body limit and the authentication docs, on `app`."""
    app.state.payments = payments
    app.state.event_hub = hub
    app.state.service_cache = ServiceCache(payments.settings.service_cache_ttl_ms)
    app.description = (app.description or "") + SIGNING_DOC
    app.add_middleware(BodyLimitMiddleware, max_bytes=payments.settings.api_max_body_bytes)
    app.include_router(routes_accounts.router)
    app.include_router(routes_intents.router)
    app.include_router(routes_policies.router)
    app.include_router(routes_channels.router)
