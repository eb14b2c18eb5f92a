"""Idempotency-Key: the first response replays, another body conflicts, concurrency makes one effect."""

from __future__ import annotations

import asyncio
import time

from paymanager.api.signing import new_nonce
from tests.integration.payments.conftest import Api


async def test_same_key_same_body_returns_the_first_response_marked_replayed(api: Api) -> None:
    first = await api.client.post("/accounts", {"kind": "user", "currency": "THB"}, key="acct-1")
    again = await api.client.post("/accounts", {"kind": "user", "currency": "THB"}, key="acct-1")
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers


async def test_same_key_different_body_answers_409(api: Api) -> None:
    await api.client.post("/accounts", {"kind": "user", "currency": "THB"}, key="acct-2")
    conflict = await api.client.post("/accounts", {"kind": "merchant", "currency": "THB"}, key="acct-2")
    assert conflict.status_code == 409
    assert conflict.json()["error"]["code"] == "idempotency_key_reused"


async def test_a_refused_request_is_replayed_too(api: Api) -> None:
    body = {"channel": "internal-p2p", "amount": 100, "currency": "THB"}
    first = await api.client.post("/intents", body, key="bad-1")
    again = await api.client.post("/intents", body, key="bad-1")
    assert first.status_code == again.status_code == 422
    assert again.json() == first.json()


async def test_every_post_needs_a_key(api: Api) -> None:
    response = await api.client.request(
        "POST", "/accounts", {"kind": "user", "currency": "THB"}, extra_headers={"Idempotency-Key": ""}
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "idempotency_key_required"


async def test_keys_are_per_service(api: Api) -> None:
    mine = await api.client.post("/accounts", {"kind": "user", "currency": "THB"}, key="shared")
    theirs = await api.admin.post("/accounts", {"kind": "user", "currency": "THB"}, key="shared")
    assert mine.json()["id"] != theirs.json()["id"]


async def test_concurrent_requests_with_one_key_create_one_intent(api: Api) -> None:
    payer = await api.client.open_account()
    payee = await api.client.open_account()
    body = {
        "channel": "internal-p2p", "amount": 500, "currency": "THB",
        "payer_account_id": payer, "payee_account_id": payee,
    }  # fmt: skip
    responses = await asyncio.gather(*(api.client.post("/intents", body, key="race") for _ in range(6)))
    assert {r.status_code for r in responses} == {201}
    assert len({r.json()["id"] for r in responses}) == 1
    assert sum(r.headers.get("Idempotent-Replayed") == "true" for r in responses) == 5
    async with api.payments.pool.acquire() as conn:
        assert (
            await conn.fetchval("SELECT count(*) FROM intent WHERE payer_account_id = $1::uuid", payer) == 1
        )


async def test_keys_are_kept_at_least_a_day(api: Api) -> None:
    await api.client.post("/accounts", {"kind": "user", "currency": "THB"}, key="ttl")
    async with api.payments.pool.acquire() as conn:
        kept = await conn.fetchval("SELECT expires_at - created_at FROM idempotency_key WHERE key = 'ttl'")
    assert kept.total_seconds() >= 86_400


async def test_a_refused_confirm_stores_its_refusal_keeps_its_signature_and_holds_nothing(api: Api) -> None:
    # The refusal happens in the work, after the signature and the key were written: the request
    # runs again with the work in a savepoint, and both must still be remembered.
    payer = await api.client.open_account()
    payee = await api.client.open_account()
    body = {
        "channel": "internal-p2p", "amount": 500, "currency": "THB",
        "payer_account_id": payer, "payee_account_id": payee,
    }  # fmt: skip
    created = await api.client.post("/intents", body)
    path = f"/intents/{created.json()['id']}/confirm"
    stamp, nonce = int(time.time()), new_nonce()
    refused = await api.client.request("POST", path, key="broke", timestamp=stamp, nonce=nonce)
    assert refused.status_code == 422
    assert refused.json()["error"]["code"] == "insufficient_funds"
    replayed = await api.client.request("POST", path, key="broke", timestamp=stamp, nonce=nonce)
    assert replayed.status_code == 401
    assert replayed.json()["error"]["code"] == "replayed"
    again = await api.client.request("POST", path, key="broke")
    assert again.status_code == 422
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == refused.json()
    async with api.payments.pool.acquire() as conn:
        intent = await conn.fetchrow(
            "SELECT status, hold_id FROM intent WHERE id = $1::uuid", created.json()["id"]
        )
        jobs = await conn.fetchval("SELECT count(*) FROM job WHERE kind = 'intent.settle'")
    assert (intent["status"], intent["hold_id"], jobs) == ("created", None, 0)
