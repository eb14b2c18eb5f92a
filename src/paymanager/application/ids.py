"""Identifiers: time-ordered UUIDs for rows, and ledger ids derived from them deterministically.

Rows get UUIDv7-style ids (48-bit millisecond time, then randomness) so b-tree inserts stay local and
`ORDER BY id DESC` is newest first, which makes `starting_after=<id>` a stable cursor. A ledger
transfer id is derived from its intent's id and its purpose, so a retried settlement submits the
very same ids and the ledger answers `exists` instead of moving money twice.

A hold id (`new_hold_id`) is marked as UUID version 8, which tells `transfer_id` to keep its
millisecond prefix in the transfer ids it derives: the ledger's id and pending_id b-trees then grow at
their right edge and their pages stay about 90 % full, where random ids leave them about 60 % full
(docs/BENCHMARKS.md, "Storage"). Ids derived from any other source (a version-7 hold id minted by an
earlier release, a refund, a session) keep the fully hashed form, so every retry still derives the
ids of its first attempt.
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid

_U128_MASK = (1 << 128) - 1


_ORDERED_VERSION = 8


def _time_ordered(version: int, now_ms: int | None) -> uuid.UUID:
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    value = (ms & ((1 << 48) - 1)) << 80 | int.from_bytes(os.urandom(10), "big")
    # The version and the RFC 4122 variant bits.
    value = (value & ~(0xF << 76)) | (version << 76)
    value = (value & ~(0x3 << 62)) | (0x2 << 62)
    return uuid.UUID(int=value)


def new_id(now_ms: int | None = None) -> uuid.UUID:
    return _time_ordered(7, now_ms)


def new_hold_id(now_ms: int | None = None) -> uuid.UUID:
    """The id of an intent's hold: time-ordered as `new_id`, marked (version 8) so that the ledger
    transfer ids derived from it keep its time prefix."""
    return _time_ordered(_ORDERED_VERSION, now_ms)


def ledger_id(row_id: uuid.UUID) -> int:
    """The ledger account id of one of our accounts: the UUID as an integer (never 0 nor 2^128-1)."""
    value = row_id.int
    assert 0 < value < _U128_MASK
    return value


def transfer_id(intent_id: uuid.UUID, purpose: str) -> int:
    """A ledger transfer id for `purpose` (e.g. `hold.amount`, `post.fee`) of one intent: from a hold
    id of `new_hold_id`, its 48-bit millisecond prefix then 80 bits of the digest; else 127 bits of it."""
    digest = hashlib.sha256(intent_id.bytes + purpose.encode()).digest()
    if intent_id.version == _ORDERED_VERSION:
        return (intent_id.int >> 80) << 80 | int.from_bytes(digest[:10], "big")
    value = int.from_bytes(digest[:16], "big") & (_U128_MASK >> 1)
    return value or 1
