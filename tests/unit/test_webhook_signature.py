"""The merchant's verification helper: the documented vector, and each way a delivery is refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from paymanager.webhooks import SignatureError, parse_header, sign, verify

# The test vector of paymanager/webhooks.py and docs/webhooks.md.
VECTOR_SECRET = "whsec_test"
VECTOR_TIMESTAMP = 1_700_000_000
VECTOR_BODY = b'{"id":"evt_test","type":"intent.settled"}'
VECTOR_HEADER = "t=1700000000,v1=24c91a0174adf950a3789d25b392b8cbefb9d0fc4cff3cc392cbbeb1a1960fc7"


def test_the_documented_vector_signs_and_verifies() -> None:
    assert sign(VECTOR_BODY, [VECTOR_SECRET], VECTOR_TIMESTAMP) == VECTOR_HEADER
    assert verify(VECTOR_BODY, VECTOR_HEADER, VECTOR_SECRET, now=VECTOR_TIMESTAMP) == VECTOR_TIMESTAMP


def test_the_vector_is_the_one_the_docs_show() -> None:
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[2] / "docs" / "webhooks.md").read_text()
    assert VECTOR_HEADER in docs
    assert VECTOR_BODY.decode() in docs


def test_a_tampered_body_is_refused() -> None:
    with pytest.raises(SignatureError) as refused:
        verify(VECTOR_BODY.replace(b"settled", b"failed"), VECTOR_HEADER, VECTOR_SECRET, now=VECTOR_TIMESTAMP)
    assert refused.value.reason == "bad_signature"


def test_another_secret_is_refused() -> None:
    with pytest.raises(SignatureError) as refused:
        verify(VECTOR_BODY, VECTOR_HEADER, "whsec_other", now=VECTOR_TIMESTAMP)
    assert refused.value.reason == "bad_signature"


def test_a_changed_timestamp_is_refused() -> None:
    header = VECTOR_HEADER.replace("t=1700000000", "t=1700000001")
    with pytest.raises(SignatureError) as refused:
        verify(VECTOR_BODY, header, VECTOR_SECRET, now=VECTOR_TIMESTAMP)
    assert refused.value.reason == "bad_signature"


@pytest.mark.parametrize("skew", [301, -301, 10_000])
def test_a_timestamp_outside_the_tolerance_is_refused(skew: int) -> None:
    with pytest.raises(SignatureError) as refused:
        verify(VECTOR_BODY, VECTOR_HEADER, VECTOR_SECRET, 300, now=VECTOR_TIMESTAMP + skew)
    assert refused.value.reason == "stale_timestamp"


@pytest.mark.parametrize("skew", [300, -300, 0])
def test_a_timestamp_inside_the_tolerance_is_accepted(skew: int) -> None:
    assert verify(VECTOR_BODY, VECTOR_HEADER, VECTOR_SECRET, 300, now=VECTOR_TIMESTAMP + skew)


@pytest.mark.parametrize(
    "header", ["", "t=1", "v1=abc", "t=x,v1=abc", "t=1;v1=abc", "garbage", "t=1,v1=a" + "b" * 3000]
)
def test_a_malformed_header_is_refused(header: str) -> None:
    with pytest.raises(SignatureError) as refused:
        verify(VECTOR_BODY, header, VECTOR_SECRET, now=1)
    assert refused.value.reason == "malformed_header"


def test_during_a_rotation_either_secret_verifies() -> None:
    header = sign(VECTOR_BODY, ["whsec_new", "whsec_old"], VECTOR_TIMESTAMP)
    assert len(parse_header(header)[1]) == 2
    for secret in ("whsec_new", "whsec_old"):
        assert verify(VECTOR_BODY, header, secret, now=VECTOR_TIMESTAMP) == VECTOR_TIMESTAMP
    with pytest.raises(SignatureError):
        verify(VECTOR_BODY, header, "whsec_third", now=VECTOR_TIMESTAMP)


def test_unknown_schemes_are_ignored() -> None:
    assert verify(VECTOR_BODY, VECTOR_HEADER + ",v2=whatever", VECTOR_SECRET, now=VECTOR_TIMESTAMP)


@given(body=st.binary(max_size=512), secret=st.text(min_size=1, max_size=40), stamp=st.integers(0, 10**10))
def test_what_is_signed_verifies_and_any_flipped_byte_does_not(body: bytes, secret: str, stamp: int) -> None:
    header = sign(body, [secret], stamp)
    assert verify(body, header, secret, now=stamp) == stamp
    if body:
        flipped = bytes([body[0] ^ 1]) + body[1:]
        with pytest.raises(SignatureError):
            verify(flipped, header, secret, now=stamp)
