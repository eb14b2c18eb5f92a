"""Idempotency-Key: the first outcome of a key is stored with the work it describes, and replayed.

The key is claimed by inserting its row in the same transaction as the request's effects. A second
request with the key, arriving while the first is running, waits on the row's primary key and then
reads the committed outcome, so concurrent requests produce one effect and one answer. A request
with the same key but another method, path or body is a conflict, never a silent success.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from paymanager.application.errors import IdempotencyKeyMissingError, IdempotencyKeyReusedError
from paymanager.application.idempotency.store import Claim, IdempotencyStore, Reference
from paymanager.db.pool import Conn
from paymanager.domain.errors import InvalidInputError

KEY_CHARS_MAX = 255
# The bytes of a digest a key's row keeps (migration 0352): a false match needs a key reused for
# another request, or a rebuilt body that differs, and then 64 equal bits.
DIGEST_BYTES_KEPT = 8


@dataclass(frozen=True, slots=True)
class StoredOutcome:
    """The first outcome of a key: its status and body, or (`reference` set, `body` None) what
    rebuilds the body."""

    status_code: int
    body: object
    reference: Reference | None = None


def request_hash(method: str, path: str, body: bytes) -> bytes:
    """What the key's first request was: 128 bits of SHA-256, enough to tell one service's requests
    apart (the key's row keeps it for a day at least, two keys per intent)."""
    return hashlib.sha256(method.encode() + b"\n" + path.encode() + b"\n" + body).digest()[:16]


def key_id(service_id: str, key: str) -> uuid.UUID:
    """The row id of a service's key: 128 bits of SHA-256, so the row keeps 16 bytes instead of both
    texts (a service id has no newline, so no two pairs share the hashed text)."""
    return uuid.UUID(bytes=hashlib.sha256(f"{service_id}\n{key}".encode()).digest()[:16])


def body_digest(body: bytes) -> bytes:
    """The digest kept beside a reference: a rebuilt body is answered only when it matches."""
    return hashlib.sha256(body).digest()[:16]


def kept(digest: bytes) -> bytes:
    """What a key's row keeps of a digest."""
    return digest[:DIGEST_BYTES_KEPT]


def matches(stored: bytes, digest: bytes) -> bool:
    """Whether a stored digest is this one's: compared over the bytes the row holds (rows written
    before migration 0352 hold 16)."""
    return len(stored) >= DIGEST_BYTES_KEPT and digest[: len(stored)] == stored


def check_key(key: str | None) -> str:
    if key is None or key == "":
        raise IdempotencyKeyMissingError(
            "every POST needs an Idempotency-Key header (a UUID is a good key)", {"header": "Idempotency-Key"}
        )
    if len(key) > KEY_CHARS_MAX or not key.isprintable():
        raise InvalidInputError(
            f"Idempotency-Key must be 1 to {KEY_CHARS_MAX} printable characters",
            {"header": "Idempotency-Key"},
        )
    return key


@dataclass(frozen=True, slots=True)
class KeyClaim:
    """One request's claim of its Idempotency-Key: who, which key, and what the request was (its
    `request_hash`)."""

    service_id: str
    key: str
    digest: bytes
    now: datetime
    ttl_sec: int

    @property
    def expires_at(self) -> datetime:
        return self.now + timedelta(seconds=self.ttl_sec)

    @property
    def key_id(self) -> uuid.UUID:
        return key_id(self.service_id, self.key)


async def claim_signed(
    conn: Conn, wanted: KeyClaim, signature: bytes, signature_expires_at: datetime
) -> tuple[bool, StoredOutcome | None]:
    """Claim the key inside the caller's transaction and remember the request's signature, in one
    round trip.

    Returns False and nothing else for a replayed signature (the caller refuses the request and rolls
    back); otherwise True and the stored outcome when the key has one (None: the key is ours now).
    Raises `IdempotencyKeyReusedError` when the key was used for a different request.
    """
    fresh, found = await IdempotencyStore(conn).claim_signed(
        Claim(
            service_id=wanted.service_id,
            key_id=wanted.key_id,
            now=wanted.now,
            signature=signature,
            signature_expires_at=signature_expires_at,
        )
    )
    if not fresh:
        return False, None
    if found is None:
        return True, None
    if not matches(found.request_hash, wanted.digest):
        # Only POSTs are idempotent, so the first request's method is known without keeping it; its
        # path and body are known by their hash alone.
        raise IdempotencyKeyReusedError(
            "this Idempotency-Key was used for a different request (another path or body); use a new "
            "key for a new request",
            {"key": wanted.key, "first_method": "POST"},
        )
    assert found.status_code is not None, "a stored key has its outcome"
    return True, StoredOutcome(found.status_code, found.response_body, found.reference)


async def store(
    conn: Conn, key: KeyClaim, outcome: StoredOutcome, notify_channel: str, notices: list[str]
) -> None:
    """Store the key's outcome and send `notices` on `notify_channel`, in one round trip."""
    await IdempotencyStore(conn).store(
        key_id=key.key_id, request_hash=kept(key.digest), expires_at=key.expires_at,
        status_code=outcome.status_code, body=outcome.body, reference=outcome.reference,
        notify_channel=notify_channel, notices=notices,
    )  # fmt: skip


async def prune_pages(conn: Conn, now: datetime, first: int, end: int) -> tuple[int, int]:
    """Forget the keys past their TTL held in pages [first, end): how many, and the table's pages."""
    return await IdempotencyStore(conn).prune_pages(now=now, first=first, end=end)
