"""The Idempotency-Key store: the only reader of `idempotency.sql`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from paymanager.db.pool import Conn
from paymanager.db.sql import load_queries

Q = load_queries("paymanager.application.idempotency", "idempotency.sql")


@dataclass(frozen=True, slots=True)
class Claim:
    """The parameters of `idempotency_key_claim_signed`."""

    service_id: str
    key: str
    method: str
    path: str
    request_hash: bytes
    now: datetime
    expires_at: datetime
    signature: bytes
    signature_expires_at: datetime


@dataclass(frozen=True, slots=True)
class ClaimResult:
    fresh_signature: bool
    claimed: bool


@dataclass(frozen=True, slots=True)
class StoredKey:
    """A committed key: the request it was first used for, and the outcome stored."""

    method: str
    path: str
    request_hash: bytes
    status_code: int | None
    response_body: object


class IdempotencyStore:
    __slots__ = ("_conn",)

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    async def claim_signed(self, claim: Claim) -> ClaimResult:
        """Remember the signature and claim the key, in one round trip."""
        row = await self._conn.fetchrow(
            Q["idempotency_key_claim_signed"], claim.service_id, claim.key, claim.method, claim.path,
            claim.request_hash, claim.now, claim.expires_at, claim.signature, claim.signature_expires_at,
        )  # fmt: skip
        assert row is not None, "the statement always returns one row"
        return ClaimResult(row["fresh_signature"], row["claimed"])

    async def get(self, *, service_id: str, key: str) -> StoredKey | None:
        row = await self._conn.fetchrow(Q["idempotency_key_get"], service_id, key)
        if row is None:
            return None
        return StoredKey(
            row["method"], row["path"], row["request_hash"], row["status_code"], row["response_body"]
        )

    async def store(
        self,
        *,
        service_id: str,
        key: str,
        status_code: int,
        body: object,
        notify_channel: str,
        notices: list[str],
    ) -> None:
        """Store the key's outcome and send `notices` on `notify_channel`, in one round trip."""
        await self._conn.execute(
            Q["idempotency_key_store"], service_id, key, status_code, body, notify_channel, notices
        )

    async def prune(self, *, now: datetime, limit: int) -> int:
        """Forget up to `limit` keys past their TTL at `now`; how many."""
        status = await self._conn.execute(Q["idempotency_key_prune"], now, limit)
        return int(status.split()[-1])
