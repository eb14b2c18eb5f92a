"""Identifiers: time-ordered UUIDs for rows, and ledger ids derived from them deterministically.

Rows get UUIDv7-style ids (48-bit millisecond time, then randomness) so b-tree inserts stay local and
`ORDER BY id DESC` is newest first, which makes `starting_after=<id>` a stable cursor. A ledger
transfer id is derived from its intent's id and its purpose, so a retried settlement submits the
very same ids and the ledger answers `exists` instead of moving money twice.
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid

_U128_MASK = (1 << 128) - 1


def new_id(now_ms: int | None = None) -> uuid.UUID:
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    value = (ms & ((1 << 48) - 1)) << 80 | int.from_bytes(os.urandom(10), "big")
    # Version 7 and the RFC 4122 variant bits.
    value = (value & ~(0xF << 76)) | (0x7 << 76)
    value = (value & ~(0x3 << 62)) | (0x2 << 62)
    return uuid.UUID(int=value)


def ledger_id(row_id: uuid.UUID) -> int:
    """The ledger account id of one of our accounts: the UUID as an integer (never 0 nor 2^128-1)."""
    value = row_id.int
    assert 0 < value < _U128_MASK
    return value


def transfer_id(intent_id: uuid.UUID, purpose: str) -> int:
    """A ledger transfer id for `purpose` (e.g. `hold.amount`, `post.fee`) of one intent."""
    digest = hashlib.sha256(intent_id.bytes + purpose.encode()).digest()
    value = int.from_bytes(digest[:16], "big") & (_U128_MASK >> 1)
    return value or 1
