"""The request signature of DESIGN §7 and the AES-256-GCM secret box."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

import pytest

from paymanager.adapters.secret_box import Secret, SecretBox, SecretBoxError, key_id_of
from paymanager.api.signing import canonical_request, request_target, sign, signature_matches, signed_headers


def test_canonical_string_is_method_target_timestamp_and_body_hash() -> None:
    body = b'{"a":1}'
    expected = f"POST\n/intents?limit=5\n1700000000\n{hashlib.sha256(body).hexdigest()}".encode()
    assert canonical_request("post", "/intents?limit=5", "1700000000", body) == expected


def test_target_has_a_question_mark_only_with_a_query() -> None:
    assert request_target("/intents", "") == "/intents"
    assert request_target("/intents", "limit=5") == "/intents?limit=5"


def test_signature_is_hex_hmac_sha256_of_the_canonical_string() -> None:
    secret = b"sk_test"
    canonical = canonical_request("GET", "/x", "1", b"")
    assert sign(secret, "GET", "/x", "1", b"") == hmac.new(secret, canonical, hashlib.sha256).hexdigest()


def test_any_changed_part_changes_the_signature() -> None:
    base = sign(b"k", "POST", "/a", "1", b"body")
    assert base != sign(b"k", "POST", "/a", "1", b"bodY")
    assert base != sign(b"k", "POST", "/a", "2", b"body")
    assert base != sign(b"k", "POST", "/b", "1", b"body")
    assert base != sign(b"k", "PUT", "/a", "1", b"body")
    assert base != sign(b"K", "POST", "/a", "1", b"body")


def test_signature_comparison_accepts_equal_and_refuses_other_or_non_ascii() -> None:
    value = sign(b"k", "GET", "/", "1", b"")
    assert signature_matches(value, value)
    assert not signature_matches(value, value[:-1] + ("0" if value[-1] != "0" else "1"))
    assert not signature_matches(value, "é" * 64)


def test_signed_headers_carry_the_three_names() -> None:
    headers = signed_headers("svc_x", b"k", "GET", "/", 5, b"")
    assert set(headers) == {"X-Service-Id", "X-Timestamp", "X-Signature"}


def test_secret_box_round_trip_is_bound_to_its_owner() -> None:
    box = SecretBox(os.urandom(32))
    sealed = box.seal(b"secret", b"svc_1")
    assert box.open(sealed, b"svc_1").reveal() == b"secret"
    with pytest.raises(SecretBoxError):
        box.open(sealed, b"svc_2")
    tampered = type(sealed)(sealed.key_id, sealed.ciphertext[:-1] + bytes([sealed.ciphertext[-1] ^ 1]))
    with pytest.raises(SecretBoxError):
        box.open(tampered, b"svc_1")


def test_rotated_box_opens_old_rows_and_seals_with_the_new_key() -> None:
    old, new = os.urandom(32), os.urandom(32)
    sealed_before = SecretBox(old).seal(b"s", b"id")
    rotated = SecretBox.from_config(base64.b64encode(new).decode(), base64.b64encode(old).decode())
    assert rotated.open(sealed_before, b"id").reveal() == b"s"
    assert rotated.seal(b"s", b"id").key_id == key_id_of(new)
    with pytest.raises(SecretBoxError):
        SecretBox(new).open(sealed_before, b"id")


def test_bad_kek_is_refused_with_a_message() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        SecretBox.from_config(base64.b64encode(b"short").decode())


def test_secret_prints_masked() -> None:
    assert "hunter2" not in repr(Secret("hunter2"))
    assert "hunter2" not in str(Secret("hunter2"))
