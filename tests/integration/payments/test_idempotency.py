"""Idempotency-Key: the first response replays, another body conflicts, concurrency makes one effect."""

from __future__ import annotations

import asyncio
import os
import time
from datetime import UTC, datetime, timedelta

import asyncpg
import orjson
import pytest

from paymanager.api.signing import new_nonce
from paymanager.application.idempotency.keys import body_digest, key_id, request_hash
from paymanager.application.idempotency.store import Claim, IdempotencyStore
from paymanager.application.intents.queries import CAPTURE_FIELDS
from paymanager.application.intents.settle import settle
from tests.integration.payments.conftest import Api
from tests.support.locks import wait_for_a_waiter_behind


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


async def _hold_the_key(conn: asyncpg.Connection, service_id: str, key: str) -> None:
    """The first request's claim of `key`, on `conn`'s open transaction (the key's lock, to its end)."""
    fresh, stored = await IdempotencyStore(conn).claim_signed(
        Claim(service_id, key_id(service_id, key), datetime.now(UTC), os.urandom(32),
              datetime.now(UTC) + timedelta(minutes=5))
    )  # fmt: skip
    assert (fresh, stored) == (True, None)


async def test_a_request_waits_for_the_first_with_its_key_and_then_sees_what_it_committed(api: Api) -> None:
    async with api.payments.pool.acquire() as holder:
        first = holder.transaction()
        await first.start()
        await _hold_the_key(holder, api.client.service_id, "held")
        second = asyncio.ensure_future(
            api.client.post("/accounts", {"kind": "user", "currency": "THB"}, key="held")
        )
        await wait_for_a_waiter_behind(api.payments.pool, holder.get_server_pid())
        assert not second.done()
        # The first request's outcome, for another request than the second's.
        now = datetime.now(UTC)
        await IdempotencyStore(holder).store(
            key_id=key_id(api.client.service_id, "held"), request_hash=bytes(8),
            expires_at=now + timedelta(days=1), status_code=201, body={"first": True}, reference=None,
            notify_channel="test", notices=[],
        )  # fmt: skip
        await first.commit()
    answer = await second
    assert answer.status_code == 409
    assert answer.json()["error"]["details"] == {"key": "held", "first_method": "POST"}


async def test_a_request_that_waited_for_a_first_rolled_back_runs_itself(api: Api) -> None:
    async with api.payments.pool.acquire() as holder:
        first = holder.transaction()
        await first.start()
        await _hold_the_key(holder, api.client.service_id, "dropped")
        second = asyncio.ensure_future(
            api.client.post("/accounts", {"kind": "user", "currency": "THB"}, key="dropped")
        )
        await wait_for_a_waiter_behind(api.payments.pool, holder.get_server_pid())
        await first.rollback()
    answer = await second
    assert answer.status_code == 201
    assert "Idempotent-Replayed" not in answer.headers
    again = await api.client.post("/accounts", {"kind": "user", "currency": "THB"}, key="dropped")
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == answer.json()


async def test_keys_are_kept_at_least_a_day(api: Api) -> None:
    api.clock.now = datetime.now(UTC)
    try:
        await api.client.post("/accounts", {"kind": "user", "currency": "THB"}, key="ttl")
    finally:
        claimed_at, api.clock.now = api.clock.now, None
    async with api.payments.pool.acquire() as conn:
        expires_at = await conn.fetchval(
            "SELECT expires_at FROM idempotency_key WHERE id = $1", key_id(api.client.service_id, "ttl")
        )
    assert expires_at - claimed_at >= timedelta(days=1)


@pytest.mark.both_ledgers
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


async def _funded_p2p(api: Api) -> dict[str, object]:
    payer = await api.client.open_account()
    payee = await api.client.open_account()
    funded = await api.admin.post(
        "/intents",
        {"channel": "admin-transfer", "amount": 10_000, "currency": "THB", "payee_account_id": payer},
    )
    assert (await api.admin.post(f"/intents/{funded.json()['id']}/confirm")).status_code == 200
    async with api.payments.pool.acquire() as conn, conn.transaction():
        await settle(api.payments, conn, funded.json()["id"], settled_by="test")
    return {
        "channel": "internal-p2p", "amount": 500, "currency": "THB",
        "payer_account_id": payer, "payee_account_id": payee, "metadata": {"order": "A-1", "n": 2},
    }  # fmt: skip


@pytest.mark.both_ledgers
async def test_an_intent_response_is_rebuilt_from_its_intent_after_the_intent_moved_on(api: Api) -> None:
    body = await _funded_p2p(api)
    created = await api.client.post("/intents", body, key="rebuilt-create")
    intent_id = created.json()["id"]
    confirmed = await api.client.post(f"/intents/{intent_id}/confirm", key="rebuilt-confirm")
    assert confirmed.status_code == 200
    async with api.payments.pool.acquire() as conn, conn.transaction():
        await settle(api.payments, conn, intent_id, settled_by="test")
    assert (await api.client.get(f"/intents/{intent_id}")).json()["status"] == "settled"
    # The keys keep a reference to the intent, not a copy of its view.
    async with api.payments.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT response_body, response_ref, response_version FROM idempotency_key WHERE id = ANY($1)",
            [key_id(api.client.service_id, k) for k in ("rebuilt-create", "rebuilt-confirm")],
        )
    assert sorted((r["response_body"], str(r["response_ref"]), r["response_version"]) for r in rows) == [
        (None, intent_id, 1), (None, intent_id, 2),
    ]  # fmt: skip
    again_create = await api.client.post("/intents", body, key="rebuilt-create")
    again_confirm = await api.client.post(f"/intents/{intent_id}/confirm", key="rebuilt-confirm")
    assert (again_create.status_code, again_create.json()) == (201, created.json())
    assert (again_confirm.status_code, again_confirm.json()) == (200, confirmed.json())
    assert (
        again_create.headers["Idempotent-Replayed"] == again_confirm.headers["Idempotent-Replayed"] == "true"
    )
    assert again_create.json()["status"] == "created"
    assert again_confirm.json()["status"] == "confirmed"


async def test_a_cancel_response_is_rebuilt_too(api: Api) -> None:
    body = await _funded_p2p(api)
    intent_id = (await api.client.post("/intents", body)).json()["id"]
    cancelled = await api.client.post(f"/intents/{intent_id}/cancel", key="rebuilt-cancel")
    again = await api.client.post(f"/intents/{intent_id}/cancel", key="rebuilt-cancel")
    assert (again.status_code, again.json()) == (200, cancelled.json())
    assert again.json()["status"] == "cancelled"


async def test_a_reference_whose_intent_is_gone_answers_410_not_another_body(api: Api) -> None:
    body = await _funded_p2p(api)
    created = await api.client.post("/intents", body, key="archived")
    async with api.payments.pool.acquire() as conn:
        # What archiving the intent's partition while its key still lives would leave.
        await conn.execute("DELETE FROM intent WHERE id = $1::uuid", created.json()["id"])
    again = await api.client.post("/intents", body, key="archived")
    assert again.status_code == 410
    assert again.json()["error"]["code"] == "idempotency_outcome_unavailable"


async def test_a_rebuilt_body_that_differs_from_the_first_answers_410(api: Api) -> None:
    body = await _funded_p2p(api)
    created = await api.client.post("/intents", body | {"description": "first"}, key="diverged")
    async with api.payments.pool.acquire() as conn:
        # A column the rebuild takes as written once at create changes after all: the digest kept
        # with the key catches it, rather than a different body being answered as the first.
        await conn.execute(
            "UPDATE intent SET description = 'changed' WHERE id = $1::uuid", created.json()["id"]
        )
    again = await api.client.post("/intents", body | {"description": "first"}, key="diverged")
    assert again.status_code == 410
    assert again.json()["error"]["code"] == "idempotency_outcome_unavailable"


async def test_a_key_stored_before_the_capture_fields_existed_replays_its_first_body(api: Api) -> None:
    body = await _funded_p2p(api)
    created = await api.client.post("/intents", body, key="before-capture")
    # The response as an earlier release answered and digested it: without the capture fields.
    earlier = {k: v for k, v in created.json().items() if k not in CAPTURE_FIELDS}
    assert earlier != created.json()
    async with api.payments.pool.acquire() as conn:
        await conn.execute(
            "UPDATE idempotency_key SET response_digest = $2 WHERE id = $1",
            key_id(api.client.service_id, "before-capture"), body_digest(orjson.dumps(earlier)),
        )  # fmt: skip
    again = await api.client.post("/intents", body, key="before-capture")
    assert (again.status_code, again.json()) == (201, earlier)
    assert again.headers["Idempotent-Replayed"] == "true"


async def test_a_key_keeps_eight_bytes_of_each_digest_and_no_path(api: Api) -> None:
    body = await _funded_p2p(api)
    created = await api.client.post("/intents", body, key="narrow")
    async with api.payments.pool.acquire() as conn:
        row = await conn.fetchrow(
            "SELECT to_jsonb(k) - 'id' - 'expires_at' - 'response_ref' AS rest, length(request_hash) AS hash,"
            "       length(response_digest) AS digest FROM idempotency_key AS k WHERE id = $1",
            key_id(api.client.service_id, "narrow"),
        )  # fmt: skip
    assert (row["hash"], row["digest"]) == (8, 8)
    assert sorted(row["rest"]) == [
        "request_hash", "response_body", "response_digest", "response_version", "status_code",
    ]  # fmt: skip
    assert created.status_code == 201


async def test_a_key_of_the_previous_release_with_sixteen_byte_digests_replays_and_refuses_reuse(
    api: Api,
) -> None:
    body = await _funded_p2p(api)
    created = await api.client.post("/intents", body, key="wide")
    raw = orjson.dumps(body)
    # The row as the release before migration 0352 wrote it: 16 bytes of each digest.
    async with api.payments.pool.acquire() as conn:
        await conn.execute(
            "UPDATE idempotency_key SET request_hash = $2, response_digest = $3 WHERE id = $1",
            key_id(api.client.service_id, "wide"), request_hash("POST", "/intents", raw),
            body_digest(orjson.dumps(created.json())),
        )  # fmt: skip
        widths = await conn.fetchrow(
            "SELECT length(request_hash) AS hash, length(response_digest) AS digest FROM idempotency_key"
            " WHERE id = $1",
            key_id(api.client.service_id, "wide"),
        )  # fmt: skip
    assert (widths["hash"], widths["digest"]) == (16, 16)
    again = await api.client.post("/intents", body, key="wide")
    assert (again.status_code, again.json()) == (201, created.json())
    assert again.headers["Idempotent-Replayed"] == "true"
    reused = await api.client.post("/intents", body | {"amount": 501}, key="wide")
    assert reused.status_code == 409
    assert reused.json()["error"]["code"] == "idempotency_key_reused"
