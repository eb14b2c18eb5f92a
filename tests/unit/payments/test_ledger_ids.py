"""Ledger transfer ids derived from an intent's hold id: deterministic for retries, time-ordered for
hold ids of `new_hold_id`, and unchanged for every other source (hold ids of an earlier release)."""

from __future__ import annotations

import hashlib
import uuid

from paymanager.application.ids import new_hold_id, new_id, transfer_id

PURPOSES = ("hold.amount", "hold.fee", "post.amount", "post.fee", "void.amount", "void.fee")


def test_a_hold_id_is_a_version_8_uuid_with_its_millisecond_first() -> None:
    hold_id = new_hold_id(now_ms=1_764_000_000_123)
    assert hold_id.version == 8
    assert hold_id.variant == uuid.RFC_4122
    assert hold_id.int >> 80 == 1_764_000_000_123


def test_transfer_ids_of_a_hold_id_keep_its_time_prefix_and_order() -> None:
    earlier, later = new_hold_id(now_ms=1_764_000_000_000), new_hold_id(now_ms=1_764_000_000_001)
    for purpose in PURPOSES:
        assert transfer_id(earlier, purpose) >> 80 == earlier.int >> 80
        assert transfer_id(earlier, purpose) < transfer_id(later, purpose)
    assert len({transfer_id(earlier, purpose) for purpose in PURPOSES}) == len(PURPOSES)


def test_transfer_ids_are_the_same_on_every_retry() -> None:
    hold_id = new_hold_id()
    again = uuid.UUID(str(hold_id))
    assert [transfer_id(hold_id, p) for p in PURPOSES] == [transfer_id(again, p) for p in PURPOSES]


def test_ids_of_other_sources_keep_the_hashed_form() -> None:
    # A hold id minted by an earlier release (version 7), a refund's or a session's id: a retry
    # after the upgrade must derive the ids its first attempt submitted.
    source = new_id()
    for purpose in (*PURPOSES, "refund.amount", "session.card"):
        digest = hashlib.sha256(source.bytes + purpose.encode()).digest()
        expected = int.from_bytes(digest[:16], "big") & ((1 << 127) - 1)
        assert transfer_id(source, purpose) == expected
