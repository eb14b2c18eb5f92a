"""HMAC authentication of every API route but health, metrics and docs (DESIGN §7).

Checks, in order, each failing with 401 and its reason code:
`missing_header` (X-Service-Id, X-Timestamp or X-Signature absent), `bad_nonce` (X-Nonce present but
not 16+ random bytes as hex or base64url), `stale_timestamp` (not unix seconds, or further than
HMAC_CLOCK_SKEW_SEC from now), `unknown_service` (no such service, or disabled), `bad_signature`
(the HMAC does not match, compared in constant time), `replayed` (this nonce was accepted from this
service before, or, for a request without a nonce, this exact signature; remembered in PostgreSQL
for the window so every api replica refuses it).

A request without X-Nonce is checked against the older canonical string for one release and logs a
deprecation warning (once per service per process, so a chatty old client cannot flood the log).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from fastapi import Request, Security
from fastapi.security import APIKeyHeader

from paymanager.api.errors import ApiError
from paymanager.api.rate_limit import ServiceRateLimiter, retry_after_header
from paymanager.api.signing import (
    NONCE_HEADER,
    SERVICE_HEADER,
    SIGNATURE_HEADER,
    SIGNATURE_HEX_CHARS,
    TIMESTAMP_HEADER,
    nonce_is_valid,
    nonce_replay_key,
    request_target,
    sign,
    signature_matches,
)
from paymanager.application.context import Payments
from paymanager.application.services import use_cases as services
from paymanager.application.services.use_cases import ServiceIdentity
from paymanager.db.pool import Conn
from paymanager.domain.channels import ADMIN_SCOPE
from paymanager.logging import get_logger

log = get_logger("paymanager.api")

# Declared as security schemes so Swagger UI shows the three headers; our own checks do the work.
_service_header = APIKeyHeader(name=SERVICE_HEADER, auto_error=False, scheme_name="ServiceId")
_timestamp_header = APIKeyHeader(name=TIMESTAMP_HEADER, auto_error=False, scheme_name="Timestamp")
_signature_header = APIKeyHeader(name=SIGNATURE_HEADER, auto_error=False, scheme_name="Signature")
_nonce_header = APIKeyHeader(name=NONCE_HEADER, auto_error=False, scheme_name="Nonce")

CACHE_ENTRIES_MAX = 10_000
# Services already warned about unsigned nonces in this process; bounded like the cache.
_nonce_deprecation_warned: set[str] = set()
TIMESTAMP_CHARS_MAX = 12


def _unauthorized(reason: str, message: str, details: dict[str, object] | None = None) -> ApiError:
    return ApiError(401, reason, message, details)


@dataclass
class _Cached:
    identity: ServiceIdentity | None
    until: float


class ServiceCache:
    """Services by id for a few seconds, so a request does not read and decrypt its caller each time."""

    def __init__(self, ttl_ms: int) -> None:
        self._ttl_s = ttl_ms / 1000
        self._entries: dict[str, _Cached] = {}

    async def get(self, payments: Payments, service_id: str) -> ServiceIdentity | None:
        now = time.monotonic()
        cached = self._entries.get(service_id)
        if cached is not None and cached.until > now:
            return cached.identity
        async with payments.pool.acquire() as conn:
            identity = await services.load_service(conn, payments.box, service_id)
        if len(self._entries) >= CACHE_ENTRIES_MAX:
            self._entries.clear()
        self._entries[service_id] = _Cached(identity, now + self._ttl_s)
        return identity


def _parse_timestamp(raw: str, now: datetime, skew_sec: int) -> int:
    try:
        # Unix seconds have 10 digits until 2286; a longer value is refused before any arithmetic.
        if len(raw) > TIMESTAMP_CHARS_MAX:
            raise ValueError(raw)
        stamp = int(raw)
    except ValueError:
        raise _unauthorized(
            "stale_timestamp", "X-Timestamp must be unix seconds", {"x_timestamp": raw[:40]}
        ) from None
    distance = abs(now.timestamp() - stamp)
    if distance > skew_sec:
        raise _unauthorized(
            "stale_timestamp",
            f"X-Timestamp is {int(distance)} s from the server's clock; the window is ±{skew_sec} s",
            {"server_time": int(now.timestamp()), "skew_sec": skew_sec},
        )
    return stamp


async def authenticate(
    request: Request,
    service_id: str | None = Security(_service_header),
    timestamp: str | None = Security(_timestamp_header),
    signature: str | None = Security(_signature_header),
    nonce: str | None = Security(_nonce_header),
) -> ServiceIdentity:
    """The FastAPI dependency: the calling service, or a 401 with the reason code."""
    payments: Payments = request.app.state.payments
    missing = [
        name
        for name, value in (
            (SERVICE_HEADER, service_id),
            (TIMESTAMP_HEADER, timestamp),
            (SIGNATURE_HEADER, signature),
        )
        if not value
    ]
    if missing:
        raise _unauthorized("missing_header", f"missing {', '.join(missing)}", {"missing": missing})
    assert service_id is not None and timestamp is not None and signature is not None  # noqa: PT018
    if nonce is not None and not nonce_is_valid(nonce):
        raise _unauthorized(
            "bad_nonce",
            "X-Nonce must be at least 16 random bytes as hex or base64url (at most 128 characters)",
        )
    skew = payments.settings.hmac_clock_skew_sec
    now = payments.clock()
    stamp = _parse_timestamp(timestamp, now, skew)
    cache: ServiceCache = request.app.state.service_cache
    identity = await cache.get(payments, service_id)
    if identity is None or identity.disabled:
        raise _unauthorized("unknown_service", "no active service with this X-Service-Id")
    body = await request.body()
    raw_path = request.scope.get("raw_path") or request.url.path.encode()
    target = request_target(raw_path.decode("latin-1"), request.scope["query_string"].decode("latin-1"))
    expected = sign(identity.secret.reveal(), request.method, target, timestamp, body, nonce)
    if len(signature) != SIGNATURE_HEX_CHARS or not signature_matches(expected, signature.lower()):
        raise _unauthorized(
            "bad_signature", "X-Signature does not match the request (see the API description)"
        )
    limiter: ServiceRateLimiter = request.app.state.rate_limiter
    wait_sec = limiter.take(identity.id, identity.requests_per_sec_max)
    if wait_sec is not None:
        raise ApiError(
            429, "rate_limited", "this service sends more requests per second than its limit",
            {"retry_after_sec": round(wait_sec, 3)}, headers={"Retry-After": retry_after_header(wait_sec)},
        )  # fmt: skip
    if nonce is None:
        _warn_no_nonce(identity.id)
        replay_key = bytes.fromhex(expected)
    else:
        replay_key = nonce_replay_key(identity.id, nonce)
    used = UsedSignature(
        replay_key, identity.id, datetime.fromtimestamp(stamp, UTC) + timedelta(seconds=skew)
    )
    if request.method == "POST":
        # Every POST runs in one transaction (`run_idempotent`), which remembers the signature in its
        # first statement, with the claim of the Idempotency-Key: one commit per POST instead of two.
        request.state.used_signature = used
    else:
        async with payments.pool.acquire() as conn:
            await remember(conn, used)
    request.state.service = identity
    return identity


def _warn_no_nonce(service_id: str) -> None:
    if service_id in _nonce_deprecation_warned:
        return
    if len(_nonce_deprecation_warned) >= CACHE_ENTRIES_MAX:
        _nonce_deprecation_warned.clear()
    _nonce_deprecation_warned.add(service_id)
    log.warning(
        "request signed without X-Nonce: deprecated, supported for one more release",
        service_id=service_id,
    )


@dataclass(frozen=True, slots=True)
class UsedSignature:
    """What the replay memory keeps of an accepted request: the (service, nonce) key, or for a
    request without a nonce the signature itself (32 bytes either way)."""

    signature: bytes
    service_id: str
    expires_at: datetime


def replayed_error() -> ApiError:
    return _unauthorized(
        "replayed", "this nonce (or signature) was already used; sign each request with a fresh X-Nonce"
    )


async def remember(conn: Conn, used: UsedSignature) -> None:
    """Record an accepted signature, or answer 401 `replayed` when it was accepted before. Inside a
    transaction a concurrent replay waits here for the first request's commit, then is refused."""
    if not await services.remember_signature(conn, used.signature, used.service_id, used.expires_at):
        raise replayed_error()


def post_signature(request: Request) -> UsedSignature:
    """The signature of a POST, for its own transaction to remember (see `run_idempotent`)."""
    used: UsedSignature | None = getattr(request.state, "used_signature", None)
    assert used is not None, "a POST reached its work without passing authenticate"
    return used


async def require_admin(
    request: Request, caller: ServiceIdentity = Security(authenticate)
) -> ServiceIdentity:
    if ADMIN_SCOPE not in caller.scopes:
        raise ApiError(403, "scope_required", "this route requires the admin scope", {"scope": ADMIN_SCOPE})
    return caller
