"""The admin API over HTTP: the admin scope (401 unsigned, 403 for another service), retrying a dead
job by id with its audit row, a replay refused without a filter, jobs by intent, services."""

from __future__ import annotations

import uuid

from paymanager.jobs import admin as jobs_admin
from paymanager.jobs import enqueue
from tests.integration.payments.conftest import Api


async def _dead_job(api: Api, intent_id: uuid.UUID | None = None) -> int:
    async with api.payments.pool.acquire() as conn:
        payload = {"intent_id": str(intent_id)} if intent_id else {}
        job_id = (await enqueue(conn, "ops.test", payload, queue="outbox")).id
        await conn.execute(
            "UPDATE job SET state = 'dead', finalized_at = now(), last_error = $2 WHERE id = $1",
            job_id, {"error": "boom", "attempt": 1},
        )  # fmt: skip
    return job_id


async def test_admin_routes_refuse_unsigned_and_non_admin_callers(api: Api) -> None:
    unsigned = await api.http.get("/admin/queues")
    assert unsigned.status_code == 401
    assert unsigned.json()["error"]["code"] == "missing_header"
    for method, path in (("GET", "/admin/queues"), ("GET", "/admin/jobs"), ("POST", "/admin/jobs/1/retry"),
                         ("POST", "/admin/services"), ("GET", "/admin/audit")):  # fmt: skip
        response = await api.client.request(method, path, {"name": "x"} if method == "POST" else None)
        assert response.status_code == 403, (path, response.text)
        assert response.json()["error"] == {
            "code": "scope_required", "message": "this route requires the admin scope",
            "details": {"scope": "admin"},
        }  # fmt: skip


async def test_retrying_a_dead_job_makes_it_available_and_is_audited(api: Api) -> None:
    job_id = await _dead_job(api)
    response = await api.admin.post(f"/admin/jobs/{job_id}/retry")
    assert response.status_code == 200, response.text
    state = await api.payments.pool.fetchval("SELECT state FROM job WHERE id = $1", job_id)
    assert state == "available"
    audit = (await api.admin.get(f"/admin/audit?target=job:{job_id}")).json()["data"]
    assert len(audit) == 1
    entry = audit[0]
    assert entry["actor"] == api.admin.service_id
    assert entry["via"] == "api"
    assert entry["action"] == "job.retry"
    assert entry["before"]["state"] == "dead"
    assert entry["after"]["state"] == "available"
    again = await api.admin.post(f"/admin/jobs/{job_id}/retry")
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "job_not_retryable"


async def test_a_replay_without_a_filter_is_refused_unless_all(api: Api) -> None:
    job_id = await _dead_job(api)
    refused = await api.admin.post("/admin/jobs/replay", {})
    assert refused.status_code == 422
    assert refused.json()["error"]["code"] == "filter_required"
    assert await api.payments.pool.fetchval("SELECT state FROM job WHERE id = $1", job_id) == "dead"
    replayed = await api.admin.post("/admin/jobs/replay", {"all": True})
    assert replayed.status_code == 200
    assert replayed.json()["replayed"] == [job_id]


async def test_values_the_database_cannot_take_are_a_422_that_changes_nothing(api: Api) -> None:
    job_id = await _dead_job(api)
    past_bigint = await api.admin.get(f"/admin/audit?before_id={2**80}")
    assert past_bigint.status_code == 422, past_bigint.text
    # A NUL byte passes the schema (a string) but no PostgreSQL text column takes it.
    nul = await api.admin.post("/admin/jobs/replay", {"kind": "ops.\u0000test"})
    assert nul.status_code == 422, nul.text
    assert nul.json()["error"]["code"] == "invalid_value"
    assert await api.payments.pool.fetchval("SELECT state FROM job WHERE id = $1", job_id) == "dead"


async def test_jobs_are_listed_by_intent(api: Api) -> None:
    intent = uuid.uuid4()
    mine = await _dead_job(api, intent)
    await _dead_job(api, uuid.uuid4())
    listed = (await api.admin.get(f"/admin/jobs?intent_id={intent}")).json()["data"]
    assert [job["id"] for job in listed] == [mine]


async def test_pausing_an_unknown_queue_is_a_404_with_a_suggestion(api: Api) -> None:
    await _dead_job(api)
    response = await api.admin.post("/admin/queues/outbx/pause")
    assert response.status_code == 404
    assert response.json()["error"]["details"] == {"queue": "outbx", "did_you_mean": "outbox"}
    paused = await api.admin.post("/admin/queues/outbox/pause")
    assert paused.status_code == 200
    assert paused.json()["paused"] is True


async def test_the_queue_list_shows_each_queues_settings(api: Api) -> None:
    await _dead_job(api)
    async with api.payments.pool.acquire() as conn:
        await jobs_admin.set_rate_limit(conn, "outbox", max_jobs=100, window_ms=1000)
        await jobs_admin.set_global_concurrency(conn, "outbox", 5)
        await jobs_admin.set_waiting_events(conn, "outbox", True)
        await jobs_admin.set_max_depth(conn, "plain", 10)
    listed = await api.admin.get("/admin/queues")
    assert listed.status_code == 200, listed.text
    by_name = {q["name"]: q for q in listed.json()["data"]}
    outbox = by_name["outbox"]
    assert (outbox["rate_limit"], outbox["concurrency_max"], outbox["waiting_events"]) == ("100/1s", 5, True)
    assert (by_name["plain"]["max_depth"], by_name["plain"]["waiting_events"]) == (10, False)
    paused = await api.admin.post("/admin/queues/outbox/pause")
    assert paused.json()["waiting_events"] is True


async def test_services_are_created_rotated_and_disabled_with_audit(api: Api) -> None:
    created = await api.admin.post("/admin/services", {"name": "ops-created"})
    assert created.status_code == 201, created.text
    service_id = created.json()["id"]
    rotated = await api.admin.post(f"/admin/services/{service_id}/rotate-secret")
    assert rotated.status_code == 200
    assert rotated.json()["secret"] != created.json()["secret"]
    disabled = await api.admin.post(f"/admin/services/{service_id}/disable")
    assert disabled.status_code == 200
    assert await api.payments.pool.fetchval(
        "SELECT disabled_at IS NOT NULL FROM service WHERE id = $1", service_id
    )
    actions = [
        e["action"] for e in (await api.admin.get(f"/admin/audit?target=service:{service_id}")).json()["data"]
    ]
    assert actions == ["service.disable", "service.rotate_secret", "service.create"]
    # The secret never reaches the audit.
    rows = await api.payments.pool.fetch("SELECT before::text, after::text FROM admin_audit")
    assert all(rotated.json()["secret"] not in (r["before"] or "") + (r["after"] or "") for r in rows)
    missing = await api.admin.post("/admin/services/svc_nope/disable")
    assert missing.status_code == 404


async def test_the_openapi_lists_the_admin_routes_errors_and_the_idempotency_key(api: Api) -> None:
    schema = (await api.http.get("/openapi.json")).json()
    retry = schema["paths"]["/admin/jobs/{job_id}/retry"]["post"]
    assert {"400", "401", "403", "404", "409", "413", "422", "429", "503"} <= set(retry["responses"])
    assert retry["responses"]["403"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorOut")
    assert any(p["name"] == "Idempotency-Key" and p["required"] for p in retry["parameters"])
    intents = schema["paths"]["/intents"]["post"]
    assert any(p["name"] == "Idempotency-Key" for p in intents["parameters"])
    assert "get" in schema["paths"]["/admin/queues"]
    assert not any(path.startswith("/dashboard") for path in schema["paths"])
