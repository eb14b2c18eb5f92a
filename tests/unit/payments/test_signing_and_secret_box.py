"""The request signature of DESIGN §7 and the AES-256-GCM secret box."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

import pytest

from paymanager.adapters.secret_box import Secret, SecretBox, SecretBoxError, key_id_of
from paymanager.api.payments import SIGNING_DOC
from paymanager.api.signing import (
    canonical_request,
    nonce_is_valid,
    nonce_replay_key,
    request_target,
    sign,
    signature_matches,
    signed_headers,
)


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


def test_signed_headers_carry_the_four_names_and_a_fresh_nonce_each_time() -> None:
    headers = signed_headers("svc_x", b"k", "GET", "/", 5, b"")
    assert set(headers) == {"X-Service-Id", "X-Timestamp", "X-Nonce", "X-Signature"}
    assert nonce_is_valid(headers["X-Nonce"])
    again = signed_headers("svc_x", b"k", "GET", "/", 5, b"")
    assert again["X-Nonce"] != headers["X-Nonce"]
    assert again["X-Signature"] != headers["X-Signature"]


def test_the_documented_test_vector_holds() -> None:
    # The vector the API description publishes for client authors (api/payments.py, SIGNING_DOC).
    nonce = "000102030405060708090a0b0c0d0e0f"
    canonical = canonical_request("GET", "/intents?limit=5", "1700000000", b"", nonce)
    assert canonical == (
        b"GET\n/intents?limit=5\n1700000000\n000102030405060708090a0b0c0d0e0f\n"
        b"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )
    expected = "f3b03c342b28accd45c2765d70b68c438b6fc683f5238a30647b3285865b4d7b"
    assert sign(b"whsec_test", "GET", "/intents?limit=5", "1700000000", b"", nonce) == expected
    assert expected in SIGNING_DOC


def test_the_nonce_is_signed_and_a_request_without_one_uses_the_older_string() -> None:
    with_nonce = sign(b"k", "GET", "/", "1", b"", "00" * 16)
    assert with_nonce != sign(b"k", "GET", "/", "1", b"", "01" * 16)
    assert canonical_request("GET", "/", "1", b"").count(b"\n") == 3
    assert canonical_request("GET", "/", "1", b"", "00" * 16).count(b"\n") == 4


def test_nonces_need_sixteen_bytes_as_hex_or_base64url() -> None:
    assert nonce_is_valid("ab" * 16)
    assert nonce_is_valid(base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("="))
    assert nonce_is_valid(base64.urlsafe_b64encode(os.urandom(16)).decode())
    for bad in ("", "ab" * 15, "zz" * 16 + "!", "a" * 129, "é" * 32, "short"):
        assert not nonce_is_valid(bad), bad


def test_nonce_replay_keys_differ_by_service_and_nonce() -> None:
    key = nonce_replay_key("svc_a", "00" * 16)
    assert len(key) == 32
    assert key != nonce_replay_key("svc_b", "00" * 16)
    assert key != nonce_replay_key("svc_a", "01" * 16)


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
