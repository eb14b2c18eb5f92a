"""The Idempotency-Key store: the only reader of `idempotency.sql`."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from paymanager.db.pool import Conn
from paymanager.db.sql import load_queries

Q = load_queries("paymanager.application.idempotency", "idempotency.sql")


@dataclass(frozen=True, slots=True)
class Claim:
    """The parameters of `idempotency_key_claim_signed`."""

    service_id: str
    key_id: uuid.UUID
    now: datetime
    signature: bytes
    signature_expires_at: datetime


@dataclass(frozen=True, slots=True)
class Reference:
    """What rebuilds a response body: the intent it showed, at which version, and the body's digest."""

    intent_id: uuid.UUID
    version: int
    digest: bytes


@dataclass(frozen=True, slots=True)
class StoredKey:
    """A committed key: the request it was first used for, and the outcome stored (a body, or the
    reference that rebuilds it)."""

    request_hash: bytes
    status_code: int | None
    response_body: object
    reference: Reference | None


class IdempotencyStore:
    __slots__ = ("_conn",)

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    async def claim_signed(self, claim: Claim) -> tuple[bool, StoredKey | None]:
        """Remember the signature and, unless it is a replay, lock the key to the end of the
        transaction and read its live outcome, in one round trip: whether the signature is fresh, and
        the key stored (None: none is, the key is ours now)."""
        row = await self._conn.fetchrow(
            Q["idempotency_key_claim_signed"], claim.service_id, claim.key_id, claim.now, claim.signature,
            claim.signature_expires_at,
        )  # fmt: skip
        assert row is not None, "the statement always returns one row"
        if row["status_code"] is None:
            return row["fresh_signature"], None
        reference = None
        if row["response_ref"] is not None:
            reference = Reference(row["response_ref"], row["response_version"], row["response_digest"])
        return row["fresh_signature"], StoredKey(
            row["request_hash"], row["status_code"], row["response_body"], reference
        )

    async def store(
        self,
        *,
        key_id: uuid.UUID,
        request_hash: bytes,
        expires_at: datetime,
        status_code: int,
        body: object,
        reference: Reference | None,
        notify_channel: str,
        notices: list[str],
    ) -> None:
        """Store the key with its request and outcome (`body`, or when `reference` is given nothing
        but the reference) and send `notices` on `notify_channel`, in one round trip."""
        ref = reference
        await self._conn.execute(
            Q["idempotency_key_store"], key_id, status_code, None if ref else body, ref and ref.intent_id,
            ref and ref.version, ref and ref.digest, request_hash, expires_at, notify_channel, notices,
        )  # fmt: skip

    async def prune_pages(self, *, now: datetime, first: int, end: int) -> tuple[int, int]:
        """Forget the keys past their TTL at `now` held in pages [first, end) of the table: how many,
        and how many pages the table has."""
        row = await self._conn.fetchrow(Q["idempotency_key_prune_pages"], now, first, end)
        assert row is not None, "the statement always returns one row"
        return int(row["deleted"]), int(row["pages"])
