"""The request signature of DESIGN §7, shared by the API's check and the `paymanager sign` command.

    canonical = METHOD + "\\n" + PATH[?QUERY] + "\\n" + TIMESTAMP + "\\n" + hex(SHA-256(BODY))
    X-Signature = hex(HMAC-SHA256(secret, canonical))

PATH[?QUERY] is the request target exactly as sent: the path, then `?` and the raw query string
only when there is one. BODY is the raw bytes (an empty body hashes the empty string). TIMESTAMP is
the `X-Timestamp` header, unix seconds.
"""

from __future__ import annotations

import hashlib
import hmac

SERVICE_HEADER = "X-Service-Id"
TIMESTAMP_HEADER = "X-Timestamp"
SIGNATURE_HEADER = "X-Signature"
SIGNATURE_HEX_CHARS = 64


def canonical_request(method: str, target: str, timestamp: str, body: bytes) -> bytes:
    body_hash = hashlib.sha256(body).hexdigest()
    return f"{method.upper()}\n{target}\n{timestamp}\n{body_hash}".encode()


def request_target(path: str, query: str) -> str:
    return f"{path}?{query}" if query else path


def sign(secret: bytes, method: str, target: str, timestamp: str, body: bytes) -> str:
    return hmac.new(secret, canonical_request(method, target, timestamp, body), hashlib.sha256).hexdigest()


def signature_matches(expected_hex: str, given_hex: str) -> bool:
    """Constant-time comparison, so timing reveals nothing about how much of a guess was right."""
    return hmac.compare_digest(expected_hex.encode("ascii"), given_hex.encode("ascii", "replace"))


def signed_headers(
    service_id: str, secret: bytes, method: str, target: str, timestamp: int, body: bytes
) -> dict[str, str]:
    """The three headers that authenticate one request."""
    return {
        SERVICE_HEADER: service_id,
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: sign(secret, method, target, str(timestamp), body),
    }
