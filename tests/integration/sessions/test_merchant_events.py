"""The merchant's session events: written once in the session change's own transaction, and handed to
the deliveries plugged into the notifier (the seam of the merchant-webhooks component)."""

from __future__ import annotations

import uuid

import asyncpg
import orjson
import pytest

from paymanager.application.sessions.notify import SessionNotifier
from paymanager.application.sessions.store import SessionEvent
from paymanager.db.pool import Conn
from tests.integration.sessions.conftest import Env


async def test_a_delivery_receives_the_event_inside_the_change_and_rolls_back_with_it(env: Env) -> None:
    delivered: list[tuple[SessionEvent, bool]] = []

    async def deliver(conn: Conn, event: SessionEvent) -> None:
        delivered.append((event, conn.is_in_transaction()))
        if event.payload["data"]["metadata"].get("fail_delivery"):  # type: ignore[index]
            raise RuntimeError("the delivery could not be enqueued")

    env.sessions.notifier = SessionNotifier(deliveries=[deliver])
    kept = await env.create([("card", "tok_e1", 100)])
    refused = await env.create([("card", "tok_e2", 100)], metadata={"fail_delivery": True})

    assert (await env.shop.post(f"/checkout-sessions/{kept['id']}/cancel")).status_code == 200
    with pytest.raises(RuntimeError):
        await env.shop.post(f"/checkout-sessions/{refused['id']}/cancel")

    assert [(e.type, str(e.session_id), inside) for e, inside in delivered] == [
        ("session.cancelled", kept["id"], True),
        ("session.cancelled", refused["id"], True),
    ]
    event = delivered[0][0]
    assert event.payload["type"] == "session.cancelled"
    assert event.payload["id"] == str(event.id)
    assert event.payload["data"]["status"] == "cancelled"  # type: ignore[index]
    # The failed delivery rolled back the cancel with its event: nothing half-done.
    assert await env.events(refused["id"]) == []
    assert (await env.get(refused["id"]))["status"] == "open"
    assert await env.events(kept["id"]) == ["session.cancelled"]


async def test_a_second_event_of_one_type_is_not_written(env: Env, pool: asyncpg.Pool) -> None:
    session = await env.create([("card", "tok_e3", 100)])
    assert (await env.shop.post(f"/checkout-sessions/{session['id']}/cancel")).status_code == 200
    async with pool.acquire() as conn:
        from paymanager.application.sessions.store import SessionStore

        row = await SessionStore(conn).get(session_id=uuid.UUID(session["id"]))
        assert row is not None
        assert await SessionNotifier().emit(conn, row, []) is None
    assert await env.events(session["id"]) == ["session.cancelled"]


async def test_a_subscribed_webhook_endpoint_gets_one_delivery_per_session_event(
    env: Env, pool: asyncpg.Pool
) -> None:
    # The endpoint row is written directly: registering over the API resolves the URL (the SSRF guard),
    # which is the webhooks component's own test; here only the announcement is in question.
    service_id = env.shop.service_id
    async with pool.acquire() as conn:
        for endpoint, types in (
            ("we_" + "a" * 32, ["session.cancelled"]),
            ("we_" + "b" * 32, ["intent.settled"]),
        ):
            await conn.execute(
                "INSERT INTO webhook_endpoint (id, service_id, url, event_types, secret_ciphertext,"
                " secret_key_id, created_at, updated_at)"
                " VALUES ($1, $2, 'https://merchant.test/hook', $3, '\\x00', 'k', now(), now())",
                endpoint, service_id, types,
            )  # fmt: skip
    session = await env.create([("card", "tok_e4", 100)])
    assert (await env.shop.post(f"/checkout-sessions/{session['id']}/cancel")).status_code == 200

    rows = await pool.fetch(
        "SELECT d.endpoint_id, e.type, e.body"
        " FROM webhook_delivery d JOIN webhook_event e ON e.id = d.event_id"
    )
    assert [(r["endpoint_id"], r["type"]) for r in rows] == [("we_" + "a" * 32, "session.cancelled")]
    body = orjson.loads(rows[0]["body"])
    assert body["data"]["id"] == session["id"]
    assert body["data"]["status"] == "cancelled"
    assert await pool.fetchval("SELECT count(*) FROM job WHERE kind = 'webhook.deliver'") == 1
