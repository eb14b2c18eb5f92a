"""Signing and verifying paymanager's merchant webhooks: the helper a merchant's receiver uses.

Every delivery carries `Paymanager-Signature: t=<unix seconds>,v1=<hex>`, where the hex is
HMAC-SHA256, keyed with the UTF-8 bytes of the endpoint's secret, of `"<t>.<raw body>"`. While a
rotated secret is in its grace period the header carries one `v1=` per secret; a receiver accepts
the delivery when any of them matches its secret.

    from paymanager.webhooks import verify
    event_time = verify(raw_body, request.headers["Paymanager-Signature"], secret, tolerance=300)

Test vector (docs/webhooks.md, tests/unit/test_webhook_signature.py): secret `whsec_test`,
timestamp `1700000000`, body `{"id":"evt_test","type":"intent.settled"}` give
`t=1700000000,v1=24c91a0174adf950a3789d25b392b8cbefb9d0fc4cff3cc392cbbeb1a1960fc7`.

This module is pure (standard library only) so a merchant may copy it.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Sequence

SIGNATURE_HEADER = "Paymanager-Signature"
EVENT_ID_HEADER = "Paymanager-Event-Id"
DEFAULT_TOLERANCE_SEC = 300
# A header longer than this is refused before any parsing: a limit on everything.
HEADER_LENGTH_MAX = 2_000


class SignatureError(ValueError):
    """The delivery is not authentic or not fresh; `reason` is a stable code."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def signature_hex(secret: str, timestamp: int, body: bytes) -> str:
    signed = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def sign(body: bytes, secrets: Sequence[str], timestamp: int) -> str:
    """The header value for `body` at `timestamp`, one `v1=` per secret (current first)."""
    if not secrets:
        raise ValueError("signing needs at least one secret")
    return ",".join([f"t={timestamp}", *(f"v1={signature_hex(s, timestamp, body)}" for s in secrets)])


def parse_header(header: str) -> tuple[int, list[str]]:
    """(timestamp, v1 signatures) of a header; `SignatureError("malformed_header")` otherwise."""
    if len(header) > HEADER_LENGTH_MAX:
        raise SignatureError("malformed_header", "the signature header is too long")
    timestamp: int | None = None
    signatures: list[str] = []
    for item in header.split(","):
        key, sep, value = item.strip().partition("=")
        if not sep:
            raise SignatureError("malformed_header", f"not a key=value item: {item!r}")
        if key == "t":
            if not value.isdigit() or len(value) > 12:
                raise SignatureError("malformed_header", "t must be unix seconds")
            timestamp = int(value)
        elif key == "v1":
            signatures.append(value)
        # Other schemes (a future v2) are ignored, so a receiver keeps working when one is added.
    if timestamp is None or not signatures:
        raise SignatureError("malformed_header", "the header needs t= and at least one v1=")
    return timestamp, signatures


def verify(
    body: bytes,
    header: str,
    secret: str,
    tolerance: int = DEFAULT_TOLERANCE_SEC,
    *,
    now: int | None = None,
) -> int:
    """Check a delivery: returns its signed timestamp, or raises `SignatureError` with reason
    `malformed_header`, `bad_signature` or `stale_timestamp` (older or newer than `tolerance`
    seconds from `now`, default the current time). Signatures are compared in constant time.

    A fresh signature can still be a replay of a captured request: remember the signatures (or the
    event ids of the `Paymanager-Event-Id` header) you accepted for at least `tolerance` seconds."""
    timestamp, signatures = parse_header(header)
    expected = signature_hex(secret, timestamp, body)
    if not any(hmac.compare_digest(expected, candidate) for candidate in signatures):
        raise SignatureError("bad_signature", "no v1 signature matches the secret")
    current = int(time.time()) if now is None else now
    if abs(current - timestamp) > tolerance:
        raise SignatureError(
            "stale_timestamp", f"signed {current - timestamp} s ago, tolerance {tolerance} s"
        )
    return timestamp
