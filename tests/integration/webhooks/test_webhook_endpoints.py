"""The endpoints API: the secret shown once, per-service visibility, SSRF refusals at registration,
clear 4xx for bad input (nothing written)."""

from __future__ import annotations

import asyncpg
import pytest

from paymanager.application.idempotency.keys import key_id
from tests.integration.webhooks.conftest import Hooks, start_hooks, stop_hooks


async def test_the_secret_is_shown_once(hooks: Hooks) -> None:
    body = {"url": hooks.receiver_url + "/once", "event_types": ["intent.settled"]}
    first = await hooks.shop.post("/webhook-endpoints", body, key="create-once")
    assert first.status_code == 201, first.text
    assert first.json()["secret"].startswith("whsec_")
    again = await hooks.shop.post("/webhook-endpoints", body, key="create-once")
    assert again.status_code == 201
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json().get("secret") is None
    assert again.json()["id"] == first.json()["id"]
    listed = await hooks.shop.get("/webhook-endpoints")
    assert [e["id"] for e in listed.json()["data"]] == [first.json()["id"]]
    assert all(e.get("secret") is None for e in listed.json()["data"])
    stored = await hooks.pool.fetchval(
        "SELECT response_body::text FROM idempotency_key WHERE id = $1",
        key_id(hooks.shop.service_id, "create-once"),
    )
    assert stored is not None
    assert first.json()["secret"] not in stored


async def test_endpoints_belong_to_their_service(hooks: Hooks) -> None:
    endpoint_id, _ = await hooks.endpoint("/mine")
    assert (await hooks.admin.get(f"/webhook-endpoints/{endpoint_id}")).status_code == 404
    assert (await hooks.admin.request("DELETE", f"/webhook-endpoints/{endpoint_id}")).status_code == 404
    assert (await hooks.admin.get("/webhook-endpoints")).json()["data"] == []


async def test_a_deleted_endpoint_receives_nothing(hooks: Hooks) -> None:
    endpoint_id, _ = await hooks.endpoint("/deleted")
    deleted = await hooks.shop.request("DELETE", f"/webhook-endpoints/{endpoint_id}")
    assert deleted.status_code == 204
    assert (await hooks.shop.get(f"/webhook-endpoints/{endpoint_id}")).status_code == 404
    await hooks.settled_intent()
    assert await hooks.deliveries(endpoint_id) == []


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"url": "ftp://x.example/", "event_types": ["*"]}, "webhook_url_refused"),
        ({"url": "http://127.0.0.1:1/x", "event_types": ["intent.nope"]}, "invalid_input"),
        ({"url": "http://127.0.0.1:1/x", "event_types": []}, "validation_error"),
        ({"url": "http://127.0.0.1:1/x", "event_types": ["*"], "extra": 1}, "validation_error"),
        ({"url": "http://127.0.0.1:1/\x00", "event_types": ["*"]}, "validation_error"),
    ],
)
async def test_bad_input_is_a_clear_4xx_and_writes_nothing(
    hooks: Hooks, body: dict[str, object], code: str
) -> None:
    response = await hooks.shop.post("/webhook-endpoints", body)
    assert 400 <= response.status_code < 500, response.text
    assert response.json()["error"]["code"] == code
    assert await hooks.pool.fetchval("SELECT count(*) FROM webhook_endpoint") == 0


async def test_unknown_ids_are_404(hooks: Hooks) -> None:
    for path in (
        "/webhook-endpoints/we_nope",
        "/webhook-deliveries/whd_nope",
        "/webhook-endpoints/" + "x" * 300,
    ):
        assert (await hooks.shop.get(path)).status_code == 404
    assert (await hooks.shop.post("/webhook-endpoints/we_nope/rotate-secret")).status_code == 404


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/hook",
        "http://10.0.0.1/hook",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]:9/hook",
        "http://loopback.test/hook",
    ],
)
async def test_internal_addresses_are_refused_without_the_allow_list(
    pool: asyncpg.Pool, database_url: str, url: str
) -> None:
    hooks, http = await start_hooks(pool, database_url, webhook_allowed_hosts="")
    try:
        hooks.resolver.names["loopback.test"] = ["127.0.0.1"]
        response = await hooks.shop.post("/webhook-endpoints", {"url": url, "event_types": ["*"]})
        assert response.status_code == 422, response.text
        assert response.json()["error"]["code"] == "webhook_url_refused"
        assert await hooks.pool.fetchval("SELECT count(*) FROM webhook_endpoint") == 0
    finally:
        await stop_hooks(hooks, http)


async def test_a_disabled_endpoint_can_be_enabled_again(hooks: Hooks) -> None:
    endpoint_id, _ = await hooks.endpoint("/back", types=["intent.created"], mode="gone")
    await hooks.settled_intent()
    await hooks.wait_finished(endpoint_id, 1, status="cancelled")
    assert (await hooks.shop.get(f"/webhook-endpoints/{endpoint_id}")).json()["status"] == "disabled"
    enabled = await hooks.shop.post(f"/webhook-endpoints/{endpoint_id}/enable")
    assert enabled.status_code == 200, enabled.text
    assert enabled.json()["status"] == "enabled"
    assert enabled.json()["disabled_reason"] is None
