"""The request signature of DESIGN §7, shared by the API's check and the `paymanager sign` command.

    canonical = METHOD + "\\n" + PATH[?QUERY] + "\\n" + TIMESTAMP + "\\n" + NONCE + "\\n" + hex(SHA-256(BODY))
    X-Signature = hex(HMAC-SHA256(secret, canonical))

PATH[?QUERY] is the request target exactly as sent: the path, then `?` and the raw query string
only when there is one. BODY is the raw bytes (an empty body hashes the empty string). TIMESTAMP is
the `X-Timestamp` header, unix seconds. NONCE is the `X-Nonce` header: at least 16 random bytes as
hex or base64url, fresh for every request, so a client may send the same request twice in one
second and the server still tells a replay from a repeat.

Requests without `X-Nonce` are signed without the NONCE line (the older string) and accepted for
one release with a deprecation warning; their replay memory is the signature itself.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets

SERVICE_HEADER = "X-Service-Id"
TIMESTAMP_HEADER = "X-Timestamp"
NONCE_HEADER = "X-Nonce"
SIGNATURE_HEADER = "X-Signature"
SIGNATURE_HEX_CHARS = 64
NONCE_BYTES_MIN = 16
# A bound on what the server hashes and remembers; 64 bytes of randomness is more than enough.
NONCE_CHARS_MAX = 128
_HEX = re.compile(r"^[0-9a-fA-F]+$")
_BASE64URL = re.compile(r"^[A-Za-z0-9_-]+={0,2}$")


def canonical_request(
    method: str, target: str, timestamp: str, body: bytes, nonce: str | None = None
) -> bytes:
    body_hash = hashlib.sha256(body).hexdigest()
    if nonce is None:
        return f"{method.upper()}\n{target}\n{timestamp}\n{body_hash}".encode()
    return f"{method.upper()}\n{target}\n{timestamp}\n{nonce}\n{body_hash}".encode()


def request_target(path: str, query: str) -> str:
    return f"{path}?{query}" if query else path


def sign(
    secret: bytes, method: str, target: str, timestamp: str, body: bytes, nonce: str | None = None
) -> str:
    canonical = canonical_request(method, target, timestamp, body, nonce)
    return hmac.new(secret, canonical, hashlib.sha256).hexdigest()


def signature_matches(expected_hex: str, given_hex: str) -> bool:
    """Constant-time comparison, so timing reveals nothing about how much of a guess was right."""
    return hmac.compare_digest(expected_hex.encode("ascii"), given_hex.encode("ascii", "replace"))


def new_nonce() -> str:
    """A fresh nonce: 16 random bytes as 32 hex characters."""
    return secrets.token_hex(NONCE_BYTES_MIN)


def nonce_is_valid(nonce: str) -> bool:
    """At least NONCE_BYTES_MIN bytes written as hex or as base64url, and at most NONCE_CHARS_MAX
    characters."""
    if not nonce or len(nonce) > NONCE_CHARS_MAX:
        return False
    if _HEX.match(nonce) and len(nonce) % 2 == 0:
        return len(nonce) // 2 >= NONCE_BYTES_MIN
    if not _BASE64URL.match(nonce):
        return False
    try:
        decoded = base64.urlsafe_b64decode(nonce + "=" * (-len(nonce) % 4))
    except (binascii.Error, ValueError):
        return False
    return len(decoded) >= NONCE_BYTES_MIN


def nonce_replay_key(service_id: str, nonce: str) -> bytes:
    """What the server remembers of a nonce: one 32-byte key per (service, nonce), so a nonce seen
    again from the same service inside the window is a replay whatever else changed."""
    return hashlib.sha256(f"nonce\n{service_id}\n{nonce}".encode()).digest()


def signed_headers(
    service_id: str,
    secret: bytes,
    method: str,
    target: str,
    timestamp: int,
    body: bytes,
    nonce: str | None = None,
) -> dict[str, str]:
    """The four headers that authenticate one request (a fresh nonce unless one is given)."""
    nonce = nonce if nonce is not None else new_nonce()
    return {
        SERVICE_HEADER: service_id,
        TIMESTAMP_HEADER: str(timestamp),
        NONCE_HEADER: nonce,
        SIGNATURE_HEADER: sign(secret, method, target, str(timestamp), body, nonce),
    }
