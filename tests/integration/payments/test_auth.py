"""HMAC authentication over the real app: every 401 reason, replays, tampering, the ±300 s edges."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import orjson
from structlog.testing import capture_logs

from paymanager.api.signing import new_nonce, sign, signed_headers
from paymanager.application.services.use_cases import create_service
from tests.integration.payments.conftest import Api
from tests.support.signed_client import SignedClient

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
STAMP = int(NOW.timestamp())


async def test_a_signed_request_is_accepted(api: Api) -> None:
    response = await api.client.get("/intents")
    assert response.status_code == 200, response.text


async def test_health_and_docs_need_no_signature(api: Api) -> None:
    for path in ("/livez", "/openapi.json", "/docs", "/metrics"):
        assert (await api.http.get(path)).status_code == 200, path


async def test_pages_for_people_carry_the_content_policy_and_api_answers_do_not(api: Api) -> None:
    # The policy keeps ReDoc's CDN logo (and anything else) from loading in a browser.
    for path in ("/docs", "/redoc", "/dashboard/login"):
        response = await api.http.get(path)
        assert "default-src 'self'" in response.headers.get("content-security-policy", ""), path
        assert len(response.headers.get_list("content-security-policy")) == 1, path
    for path in ("/livez", "/openapi.json"):
        assert "content-security-policy" not in (await api.http.get(path)).headers, path
    assert "content-security-policy" not in (await api.client.get("/intents")).headers


async def test_each_missing_header_is_named(api: Api) -> None:
    headers = api.client.headers_for("GET", "/intents", b"")
    for missing in ("X-Service-Id", "X-Timestamp", "X-Signature"):
        partial = {k: v for k, v in headers.items() if k != missing}
        response = await api.http.get("/intents", headers=partial)
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "missing_header"
        assert response.json()["error"]["details"]["missing"] == [missing]


async def test_unknown_service_is_refused(api: Api) -> None:
    headers = api.client.headers_for("GET", "/intents", b"")
    headers["X-Service-Id"] = "svc_" + "0" * 32
    response = await api.http.get("/intents", headers=headers)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unknown_service"


async def test_a_disabled_service_is_refused_though_its_signature_is_right(api: Api) -> None:
    async with api.payments.pool.acquire() as conn:
        service, secret = await create_service(conn, api.payments.box, "retired", admin=True)
        await conn.execute("UPDATE service SET disabled_at = now() WHERE id = $1", service.id)
    retired = SignedClient(api.http, service.id, secret)
    for response in (
        await retired.get("/intents"),
        await retired.post("/accounts", {"kind": "user", "currency": "THB"}),
    ):
        assert response.status_code == 401, response.text
        assert response.json()["error"]["code"] == "unknown_service"


async def test_a_wrong_secret_is_a_bad_signature(api: Api) -> None:
    api.client.secret, real = "sk_wrong", api.client.secret
    try:
        response = await api.client.get("/intents")
    finally:
        api.client.secret = real
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "bad_signature"


async def test_a_body_changed_after_signing_is_a_bad_signature(api: Api) -> None:
    body = orjson.dumps({"kind": "user", "currency": "THB"})
    headers = api.client.headers_for("POST", "/accounts", body)
    headers |= {"Idempotency-Key": "k1", "Content-Type": "application/json"}
    changed = body.replace(b"THB", b"USD")
    response = await api.http.post("/accounts", content=changed, headers=headers)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "bad_signature"


async def test_a_query_changed_after_signing_is_a_bad_signature(api: Api) -> None:
    headers = api.client.headers_for("GET", "/intents?limit=5", b"")
    response = await api.http.get("/intents?limit=6", headers=headers)
    assert response.json()["error"]["code"] == "bad_signature"


async def test_a_replayed_request_is_refused(api: Api) -> None:
    headers = api.client.headers_for("GET", "/intents?limit=3", b"")
    first = await api.http.get("/intents?limit=3", headers=headers)
    assert first.status_code == 200, first.text
    again = await api.http.get("/intents?limit=3", headers=headers)
    assert again.status_code == 401
    assert again.json()["error"]["code"] == "replayed"


async def test_a_post_signature_refused_for_its_idempotency_key_cannot_be_replayed(api: Api) -> None:
    # The Idempotency-Key is not covered by the signature: a POST refused before run_idempotent's
    # transaction (no key, or an invalid one) must still spend its signature, or whoever saw that
    # request could send it again with a key of their choosing and have it executed.
    body = orjson.dumps({"kind": "user", "currency": "THB"})
    headers = api.client.headers_for("POST", "/accounts", body) | {"Content-Type": "application/json"}
    first = await api.http.post("/accounts", content=body, headers=headers)
    assert first.status_code == 400, first.text
    replay = await api.http.post("/accounts", content=body, headers=headers | {"Idempotency-Key": "attacker"})
    assert replay.status_code == 401, replay.text
    assert replay.json()["error"]["code"] == "replayed"


async def test_timestamps_exactly_300_s_away_pass_and_301_s_away_fail(api: Api) -> None:
    api.clock.now = NOW
    for offset, expected in ((-300, 200), (300, 200), (-301, 401), (301, 401)):
        response = await api.client.request("GET", "/intents", timestamp=STAMP + offset)
        assert response.status_code == expected, (offset, response.text)
        if expected == 401:
            assert response.json()["error"]["code"] == "stale_timestamp"


async def test_a_timestamp_that_is_not_a_number_is_stale(api: Api) -> None:
    for value in ("yesterday", "9" * 400, "-1", "1e9"):
        headers = api.client.headers_for("GET", "/intents", b"")
        headers["X-Timestamp"] = value
        response = await api.http.get("/intents", headers=headers)
        assert response.status_code == 401, value
        assert response.json()["error"]["code"] == "stale_timestamp"


async def test_admin_routes_refuse_a_service_without_the_scope(api: Api) -> None:
    response = await api.client.get("/policies")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "scope_required"
    assert (await api.admin.get("/policies")).status_code == 200


async def test_openapi_explains_signing(api: Api) -> None:
    spec = (await api.http.get("/openapi.json")).json()
    assert "X-Signature" in spec["info"]["description"]
    assert "replayed" in spec["info"]["description"]


async def test_body_over_the_limit_answers_413(api: Api) -> None:
    body = b"x" * (api.payments.settings.api_max_body_bytes + 1)
    headers = api.client.headers_for("POST", "/accounts", body) | {"Idempotency-Key": "big"}
    response = await api.http.post("/accounts", content=body, headers=headers)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"


async def test_chunked_body_over_the_limit_answers_413(api: Api) -> None:
    """No Content-Length to refuse up front: the body is counted as it arrives."""
    body = b"x" * (api.payments.settings.api_max_body_bytes + 1)
    headers = api.client.headers_for("POST", "/accounts", body) | {"Idempotency-Key": "big-chunked"}

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 4096):
            yield body[start : start + 4096]

    response = await api.http.post("/accounts", content=chunks(), headers=headers)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"


async def test_every_post_route_refuses_a_replayed_signature(api: Api) -> None:
    """POSTs remember their signature inside their own transaction; none may skip it."""
    bodies = {
        "/accounts": {"kind": "user", "currency": "THB"},
        "/intents/quote": {"channel": "internal-p2p", "amount": 100, "currency": "THB"},
        "/intents": {"channel": "internal-p2p", "amount": 100, "currency": "THB"},
        "/policies": {"channel": "internal-p2p", "max_amount": 10},
        "/webhook-endpoints": {"url": "http://127.0.0.1:9/hook", "event_types": ["*"]},
        "/intents/{intent_id}/refunds": {"amount": 1},
        "/admin/psp/{tx_id}/resolve": {"failed": "checked by hand"},
        "/admin/jobs/replay": {"kind": "nothing.dead"},
        "/admin/queues/{name}/max-depth": {"max_depth": None},
        "/admin/services": {"name": "replay-sweep"},
    }
    spec = (await api.http.get("/openapi.json")).json()
    posts = [path for path, operations in spec["paths"].items() if "post" in operations]
    assert len(posts) >= 6
    # A PSP's own webhook is authenticated by the PSP's signature, not ours: nothing to remember.
    signed_posts = [path for path in posts if not path.startswith("/webhooks/psp/")]
    for path in signed_posts:
        concrete = (
            path.replace("{intent_id}", "00000000-0000-7000-8000-000000000000")
            .replace("{endpoint_id}", "we_" + "0" * 32)
            .replace("{delivery_id}", "whd_" + "0" * 32)
            .replace("{tx_id}", "00000000-0000-7000-8000-000000000000")
            .replace("{job_id}", "1")
            .replace("{name}", "outbox")
            .replace("{service_id}", "svc_unknown")
        )
        assert "{" not in concrete, f"give {path}'s parameter a value here"
        body = orjson.dumps(bodies.get(path)) if path in bodies else b""
        headers = api.admin.headers_for("POST", concrete, body) | {"Idempotency-Key": f"replay-{path}"}
        if body:
            headers["Content-Type"] = "application/json"
        first = await api.http.post(concrete, content=body, headers=headers)
        assert first.status_code != 401, (path, first.text)
        again = await api.http.post(concrete, content=body, headers=headers)
        assert again.status_code == 401, (path, again.text)
        assert again.json()["error"]["code"] == "replayed"


async def test_the_same_read_twice_in_one_second_with_fresh_nonces_is_accepted(api: Api) -> None:
    stamp = int(datetime.now(UTC).timestamp())
    for _ in range(3):
        headers = signed_headers(
            api.client.service_id, api.client.secret.encode(), "GET", "/intents", stamp, b""
        )
        response = await api.http.get("/intents", headers=headers)
        assert response.status_code == 200, response.text


async def test_a_nonce_seen_again_is_replayed_even_with_another_timestamp(api: Api) -> None:
    stamp = int(datetime.now(UTC).timestamp())
    nonce = new_nonce()
    secret = api.client.secret.encode()
    first = signed_headers(api.client.service_id, secret, "GET", "/intents", stamp, b"", nonce)
    assert (await api.http.get("/intents", headers=first)).status_code == 200
    later = signed_headers(api.client.service_id, secret, "GET", "/intents", stamp - 1, b"", nonce)
    again = await api.http.get("/intents", headers=later)
    assert again.status_code == 401
    assert again.json()["error"]["code"] == "replayed"


async def test_the_same_nonce_from_another_service_is_not_a_replay(api: Api) -> None:
    stamp = int(datetime.now(UTC).timestamp())
    nonce = new_nonce()
    for client in (api.client, api.admin):
        headers = signed_headers(
            client.service_id, client.secret.encode(), "GET", "/intents", stamp, b"", nonce
        )
        assert (await api.http.get("/intents", headers=headers)).status_code == 200


async def test_a_malformed_nonce_is_refused_as_bad_nonce(api: Api) -> None:
    stamp = int(datetime.now(UTC).timestamp())
    for bad in ("short", "ab" * 15, "x" * 200, "not base64!" * 3):
        headers = signed_headers(
            api.client.service_id, api.client.secret.encode(), "GET", "/intents", stamp, b"", bad
        )
        response = await api.http.get("/intents", headers=headers)
        assert response.status_code == 401, bad
        assert response.json()["error"]["code"] == "bad_nonce", bad


async def test_removing_the_nonce_breaks_the_signature(api: Api) -> None:
    headers = api.client.headers_for("GET", "/intents", b"")
    del headers["X-Nonce"]
    response = await api.http.get("/intents", headers=headers)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "bad_signature"


async def test_a_request_without_a_nonce_is_accepted_once_with_a_deprecation_warning(api: Api) -> None:
    stamp = int(datetime.now(UTC).timestamp())
    signature = sign(api.client.secret.encode(), "GET", "/intents", str(stamp), b"")
    headers = {"X-Service-Id": api.client.service_id, "X-Timestamp": str(stamp), "X-Signature": signature}
    with capture_logs() as logs:
        first = await api.http.get("/intents", headers=headers)
        again = await api.http.get("/intents", headers=headers)
    assert first.status_code == 200, first.text
    assert again.status_code == 401
    assert again.json()["error"]["code"] == "replayed"
    warnings = [entry for entry in logs if "without X-Nonce" in entry["event"]]
    assert len(warnings) == 1
    assert warnings[0]["service_id"] == api.client.service_id
