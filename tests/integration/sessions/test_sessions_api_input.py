"""Bad input to the sessions API: a clear 4xx in the one error shape, and nothing changes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.integration.sessions.conftest import Env


def _body(env: Env, **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "merchant_account_id": env.merchant,
        "amount": 1_000,
        "currency": "THB",
        "legs": [
            {"kind": "gift_card", "card": "GC-1", "amount": 400},
            {"kind": "card", "card": "tok", "amount": 600},
        ],
    }
    return body | changes


async def _rows(env: Env) -> int:
    return int(await env.pool.fetchval("SELECT count(*) FROM checkout_session"))


@pytest.mark.parametrize(
    ("changes", "status", "code"),
    [
        ({"amount": 999}, 422, "legs_do_not_sum_to_amount"),
        ({"legs": []}, 422, "validation_error"),
        ({"legs": [{"kind": "card", "card": "a", "amount": 500},
                   {"kind": "card", "card": "b", "amount": 500}]}, 422, "invalid_input"),
        ({"legs": [{"kind": "gift_card", "card": "GC-1", "amount": 500},
                   {"kind": "gift_card", "card": "GC-1", "amount": 500}]}, 422, "invalid_input"),
        ({"legs": [{"kind": "card", "card": "tok", "amount": -1_000}]}, 422, "validation_error"),
        ({"legs": [{"kind": "cash", "card": "tok", "amount": 1_000}]}, 422, "validation_error"),
        ({"legs": [{"kind": "card", "card": "tok with spaces", "amount": 1_000}]}, 422, "validation_error"),
        ({"surprise": 1}, 422, "validation_error"),
        ({"ttl_sec": 10 * 86_400}, 422, "invalid_input"),
        ({"ttl_sec": 60, "expires_at": "2030-01-01T00:00:00Z"}, 422, "invalid_input"),
        ({"expires_at": "2000-01-01T00:00:00Z"}, 422, "invalid_input"),
        ({"expires_at": "2030-01-01T00:00:00"}, 422, "validation_error"),
        ({"currency": "USD"}, 422, "currency_mismatch"),
        ({"currency": "XYZ"}, 422, "unknown_currency"),
        ({"merchant_account_id": "00000000-0000-7000-8000-000000000000"}, 404, "not_found"),
        ({"merchant_account_id": "not-a-uuid"}, 422, "validation_error"),
    ],
)  # fmt: skip
async def test_a_bad_session_is_refused_and_nothing_is_created(
    env: Env, changes: dict[str, Any], status: int, code: str
) -> None:
    before = await _rows(env)
    response = await env.shop.post("/checkout-sessions", _body(env, **changes))
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code
    assert await _rows(env) == before


async def test_a_user_account_cannot_be_the_merchant(env: Env) -> None:
    user = await env.shop.open_account(kind="user")
    response = await env.shop.post("/checkout-sessions", _body(env, merchant_account_id=user))
    assert response.status_code == 422
    assert await _rows(env) == 0


async def test_a_post_without_an_idempotency_key_is_refused(env: Env) -> None:
    response = await env.shop.request(
        "POST", "/checkout-sessions", _body(env), extra_headers={"Idempotency-Key": ""}
    )
    assert response.status_code == 400
    assert await _rows(env) == 0


async def test_the_same_key_replays_and_another_body_under_it_conflicts(env: Env) -> None:
    first = await env.shop.post("/checkout-sessions", _body(env), key="k-1")
    again = await env.shop.post("/checkout-sessions", _body(env), key="k-1")
    assert first.status_code == again.status_code == 201
    assert again.headers.get("Idempotent-Replayed") == "true"
    assert again.json()["id"] == first.json()["id"]
    other = await env.shop.post("/checkout-sessions", _body(env, metadata={"x": 1}), key="k-1")
    assert other.status_code == 409
    assert await _rows(env) == 1


async def test_unknown_sessions_are_404_and_a_finished_one_refuses_confirm_and_cancel(env: Env) -> None:
    unknown = "00000000-0000-7000-8000-000000000001"
    assert (await env.shop.get(f"/checkout-sessions/{unknown}")).status_code == 404
    assert (await env.confirm(unknown)).status_code == 404
    assert (await env.shop.get("/checkout-sessions/nope")).status_code == 422
    session = await env.create([("card", "tok_z", 100)])
    assert (await env.shop.post(f"/checkout-sessions/{session['id']}/cancel")).status_code == 200
    for action in ("confirm", "cancel"):
        refused = await env.shop.post(f"/checkout-sessions/{session['id']}/{action}")
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"]["code"] == "invalid_transition"


async def test_another_services_session_is_not_found(env: Env) -> None:
    from paymanager.application.services.use_cases import create_service
    from tests.support.signed_client import SignedClient

    session = await env.create([("card", "tok_y", 100)])
    async with env.pool.acquire() as conn:
        other, secret = await create_service(conn, env.components.payments.box, "other", admin=False)
    stranger = SignedClient(env.shop.http, other.id, secret)
    assert (await stranger.get(f"/checkout-sessions/{session['id']}")).status_code == 404
    assert (await stranger.post(f"/checkout-sessions/{session['id']}/confirm")).status_code == 404
    assert (await env.get(session["id"]))["status"] == "open"


async def test_expires_at_sets_the_expiry(env: Env) -> None:
    when = datetime.now(UTC) + timedelta(minutes=5)
    response = await env.shop.post("/checkout-sessions", _body(env, expires_at=when.isoformat()))
    assert response.status_code == 201, response.text
    assert datetime.fromisoformat(response.json()["expires_at"]) == when
