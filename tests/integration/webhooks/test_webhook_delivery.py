"""Deliveries: enqueued with the status change, signed, retried on the schedule, dead-lettered,
replayed, disabled on 410 or after days of failures, isolated per endpoint, re-checked for SSRF."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import orjson

from paymanager.jobs import OUTBOX_SCHEDULE
from paymanager.jobs.admin import pause_queue, resume_queue
from paymanager.jobs.maintenance import Maintenance
from paymanager.webhooks import SIGNATURE_HEADER, parse_header
from tests.integration.webhooks.conftest import Hooks, start_hooks, stop_hooks
from tests.support.intent_flows import confirmed_manual
from tests.support.waiting import wait_until


async def _make_due(pool: asyncpg.Pool, job_id: int) -> None:
    """What the passing of time does to a retrying job: it becomes available now (the promoter's step)."""
    moved = await pool.fetch(
        "WITH due AS (UPDATE job SET state = 'available', run_at = now()"
        " WHERE id = $1 AND state = 'retryable' RETURNING queue) SELECT pg_notify('pm_job_available', queue)"
        " FROM due",
        job_id,
    )
    assert len(moved) == 1, "the job was not waiting for a retry"


async def _wait_delivery(hooks: Hooks, delivery_id: str, **expected: object) -> asyncpg.Record:
    found: list[asyncpg.Record] = []

    async def reached() -> bool:
        row = await hooks.pool.fetchrow("SELECT * FROM webhook_delivery WHERE id = $1", delivery_id)
        if row is not None and all(row[k] == v for k, v in expected.items()):
            found.append(row)
            return True
        return False

    await wait_until(reached)
    return found[0]


async def test_every_status_change_is_delivered_signed_and_logged(hooks: Hooks) -> None:
    endpoint_id, _ = await hooks.endpoint("/all")
    intent_id = await hooks.settled_intent()

    await hooks.wait_finished(endpoint_id, 3)
    received = hooks.receiver.received_on("/all")
    assert sorted(r.type or "" for r in received) == ["intent.confirmed", "intent.created", "intent.settled"]
    assert all(r.verified for r in received)
    log = await hooks.shop.get(f"/webhook-deliveries?endpoint_id={endpoint_id}")
    assert log.status_code == 200, log.text
    rows = log.json()["data"]
    assert {row["status"] for row in rows} == {"succeeded"}
    assert {row["last_status_code"] for row in rows} == {200}
    assert all(row["attempts"] == 1 and row["last_latency_ms"] is not None for row in rows)
    assert {row["event_id"] for row in rows} == {r.event_id for r in received}
    body = await hooks.pool.fetchval(
        "SELECT body FROM webhook_event WHERE id = $1",
        next(r.event_id for r in received if r.type == "intent.settled"),
    )
    assert f'"intent_id": "{intent_id}"' in body


async def test_a_partial_capture_is_announced_with_what_it_captured(hooks: Hooks) -> None:
    endpoint_id, _ = await hooks.endpoint("/captured", types=["intent.settled"])
    payer = await hooks.shop.open_account()
    payee = await hooks.shop.open_account()
    funding = await hooks.admin.fund(payer, 10_000)
    await hooks.wait_status(funding["id"], "settled")
    view = await confirmed_manual(hooks.shop, payer, payee, 1_000)
    captured = await hooks.shop.post(f"/intents/{view['id']}/capture", {"amount": 600})
    assert captured.status_code == 200, captured.text

    await hooks.wait_finished(endpoint_id, 1)
    [event] = hooks.receiver.received_on("/captured")
    body = await hooks.pool.fetchval("SELECT body FROM webhook_event WHERE id = $1", event.event_id)
    data = orjson.loads(body)["data"]
    assert (data["status"], data["capture_method"], data["amount"], data["fee"]) == (
        "settled",
        "manual",
        1_000,
        5,
    )
    assert (data["amount_captured"], data["fee_captured"]) == (600, 3)


async def test_only_subscribed_types_reach_an_endpoint(hooks: Hooks) -> None:
    endpoint_id, _ = await hooks.endpoint("/settled", types=["intent.settled"])
    await hooks.settled_intent()
    await hooks.wait_finished(endpoint_id, 1)
    assert [r.type for r in hooks.receiver.received_on("/settled")] == ["intent.settled"]
    assert len(await hooks.deliveries(endpoint_id)) == 1


async def _count(hooks: Hooks, path: str, n: int) -> bool:
    return len(hooks.receiver.received_on(path)) >= n


async def test_a_rolled_back_status_change_enqueues_no_delivery(hooks: Hooks) -> None:
    endpoint_id, _ = await hooks.endpoint("/none", types=["intent.cancelled"])
    payer = await hooks.shop.open_account()
    payee = await hooks.shop.open_account()
    body = {"channel": "internal-p2p", "amount": 100, "currency": "THB",
            "payer_account_id": payer, "payee_account_id": payee}  # fmt: skip
    created = await hooks.shop.post("/intents", body)
    intent_id = uuid.UUID(created.json()["id"])
    async with hooks.pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        await conn.execute(
            "UPDATE intent SET status = 'cancelled', version = version + 1, finished_at = now()"
            " WHERE id = $1",
            intent_id,
        )
        inside = await conn.fetchval(
            "SELECT count(*) FROM webhook_delivery WHERE endpoint_id = $1", endpoint_id
        )
        jobs_inside = await conn.fetchval("SELECT count(*) FROM job WHERE queue = 'webhooks'")
        await tx.rollback()
    assert inside == 1
    assert jobs_inside == 1
    assert await hooks.pool.fetchval("SELECT count(*) FROM job WHERE queue = 'webhooks'") == 0
    assert await hooks.deliveries(endpoint_id) == []


async def test_failures_retry_on_the_schedule_then_dead_letter_and_replay(hooks: Hooks) -> None:
    start = datetime.now(UTC)
    hooks.clock.now = start
    endpoint_id, _ = await hooks.endpoint("/flaky", types=["intent.settled"], mode="fail")
    await hooks.settled_intent()
    delivery = (await hooks.deliveries(endpoint_id))[0]
    attempts = hooks.payments.settings.webhook_max_attempts
    assert attempts == 7  # the first try and six retries: 1 min, 5 min, 30 min, 2 h, 12 h, 24 h
    for attempt in range(1, attempts):
        row = await _wait_delivery(hooks, delivery["id"], attempts=attempt, status="retrying")
        delay = timedelta(milliseconds=OUTBOX_SCHEDULE.delay_ms(attempt))
        assert row["next_attempt_at"] - row["last_attempt_at"] == delay
        assert row["last_status_code"] == 500
        job_id = row["job_id"]
        await wait_until(lambda: _job_in(hooks, job_id, "retryable"))  # noqa: B023 - awaited at once
        job = await hooks.pool.fetchrow("SELECT run_at, attempted_at FROM job WHERE id = $1", row["job_id"])
        assert job["run_at"] - job["attempted_at"] >= delay
        hooks.clock.now = row["next_attempt_at"]
        await _make_due(hooks.pool, row["job_id"])
    dead = await _wait_delivery(hooks, delivery["id"], attempts=attempts, status="dead")
    assert dead["next_attempt_at"] is None
    await wait_until(lambda: _job_in(hooks, dead["job_id"], "dead"))
    ids = {r.event_id for r in hooks.receiver.received_on("/flaky")}
    assert ids == {delivery["event_id"]}, "every retry carries the same event id"
    assert len(hooks.receiver.received_on("/flaky")) == attempts

    hooks.clock.now = None
    hooks.receiver.set_path("/flaky", mode="ok", secrets=hooks.receiver.behaviour("/flaky").secrets)
    dead_log = await hooks.shop.get("/webhook-deliveries?status=dead")
    assert [d["id"] for d in dead_log.json()["data"]] == [delivery["id"]]
    replayed = await hooks.shop.post(f"/webhook-deliveries/{delivery['id']}/replay")
    assert replayed.status_code == 200, replayed.text
    await _wait_delivery(hooks, delivery["id"], status="succeeded")
    assert hooks.receiver.received_on("/flaky")[-1].answered == 200
    assert hooks.receiver.received_on("/flaky")[-1].event_id == delivery["event_id"]
    again = await hooks.shop.post(f"/webhook-deliveries/{delivery['id']}/replay")
    assert again.status_code == 200
    pending = await hooks.shop.post(f"/webhook-deliveries/{delivery['id']}/replay")
    assert pending.status_code in (200, 409)


async def _job_in(hooks: Hooks, job_id: int, state: str) -> bool:
    return bool(await hooks.pool.fetchval("SELECT state::text FROM job WHERE id = $1", job_id) == state)


async def test_a_delivery_whose_job_dies_of_stalls_is_dead_lettered_and_replayable(hooks: Hooks) -> None:
    endpoint_id, _ = await hooks.endpoint("/stalled", types=["intent.settled"])
    async with hooks.pool.acquire() as conn:
        await pause_queue(conn, "webhooks")
    await hooks.settled_intent()
    delivery = (await hooks.deliveries(endpoint_id))[0]
    # As the job stands after workers holding it were killed JOB_MAX_STALLED times, and the last
    # one's lease has run out: the next rescue gives up on it.
    stalled = await hooks.pool.execute(
        "UPDATE job SET state = 'running', lease_owner = 'gone.1', lease_token = gen_random_uuid(),"
        " lease_expires_at = now() - interval '1 second', attempted_at = now(), stalled_count = $2"
        " WHERE id = $1 AND state = 'available'",
        delivery["job_id"], hooks.payments.settings.job_max_stalled,
    )  # fmt: skip
    assert stalled == "UPDATE 1"
    maintenance = next(s for s in hooks.components.services if isinstance(s, Maintenance))

    await maintenance.rescue()

    assert await _job_in(hooks, delivery["job_id"], "dead")
    dead = await hooks.pool.fetchrow("SELECT * FROM webhook_delivery WHERE id = $1", delivery["id"])
    assert dead["status"] == "dead"
    assert dead["finished_at"] is not None
    assert f"its job {delivery['job_id']} died: lease of gone.1 expired" == dead["last_error"]
    dead_log = await hooks.shop.get("/webhook-deliveries?status=dead")
    assert [d["id"] for d in dead_log.json()["data"]] == [delivery["id"]]
    async with hooks.pool.acquire() as conn:
        await resume_queue(conn, "webhooks")
    replayed = await hooks.shop.post(f"/webhook-deliveries/{delivery['id']}/replay")
    assert replayed.status_code == 200, replayed.text
    await _wait_delivery(hooks, delivery["id"], status="succeeded")
    assert [r.event_id for r in hooks.receiver.received_on("/stalled")] == [delivery["event_id"]]


async def test_replay_of_a_delivery_still_being_tried_is_refused(hooks: Hooks) -> None:
    endpoint_id, _ = await hooks.endpoint("/busy", types=["intent.settled"], mode="fail")
    await hooks.settled_intent()
    delivery = (await hooks.deliveries(endpoint_id))[0]
    await _wait_delivery(hooks, delivery["id"], status="retrying")
    refused = await hooks.shop.post(f"/webhook-deliveries/{delivery['id']}/replay")
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "invalid_transition"
    unknown = await hooks.shop.post("/webhook-deliveries/whd_nope/replay")
    assert unknown.status_code == 404


async def test_an_endpoint_answering_410_is_disabled_and_says_so(hooks: Hooks) -> None:
    endpoint_id, _ = await hooks.endpoint("/gone", types=["intent.created"], mode="gone")
    await hooks.settled_intent()
    delivery = (await hooks.deliveries(endpoint_id))[0]
    row = await _wait_delivery(hooks, delivery["id"], status="cancelled")
    assert row["last_status_code"] == 410
    shown = (await hooks.shop.get(f"/webhook-endpoints/{endpoint_id}")).json()
    assert shown["status"] == "disabled"
    assert "410" in shown["disabled_reason"]
    await hooks.settled_intent()
    assert len(await hooks.deliveries(endpoint_id)) == 1, "a disabled endpoint receives nothing more"
    assert len(hooks.receiver.received_on("/gone")) == 1


async def test_an_endpoint_failing_for_three_days_is_disabled(hooks: Hooks) -> None:
    start = datetime.now(UTC)
    hooks.clock.now = start
    endpoint_id, _ = await hooks.endpoint("/down", types=["intent.settled"], mode="fail")
    await hooks.settled_intent()
    delivery = (await hooks.deliveries(endpoint_id))[0]
    row = await _wait_delivery(hooks, delivery["id"], attempts=1, status="retrying")
    await wait_until(lambda: _job_in(hooks, row["job_id"], "retryable"))
    hooks.clock.now = start + timedelta(days=3)
    await _make_due(hooks.pool, row["job_id"])
    dead = await _wait_delivery(hooks, delivery["id"], attempts=2, status="dead")
    assert dead["last_status_code"] == 500
    hooks.clock.now = None  # the API checks its callers' signatures on the same clock
    shown = (await hooks.shop.get(f"/webhook-endpoints/{endpoint_id}")).json()
    assert shown["status"] == "disabled"
    assert "failed since" in shown["disabled_reason"]


async def test_a_success_clears_the_failing_mark(hooks: Hooks) -> None:
    endpoint_id, _ = await hooks.endpoint("/heals", types=["intent.settled"], mode="fail")
    await hooks.settled_intent()
    delivery = (await hooks.deliveries(endpoint_id))[0]
    row = await _wait_delivery(hooks, delivery["id"], attempts=1, status="retrying")
    assert await hooks.pool.fetchval("SELECT failing_since FROM webhook_endpoint WHERE id = $1", endpoint_id)
    hooks.receiver.set_path("/heals", mode="ok", secrets=hooks.receiver.behaviour("/heals").secrets)
    await wait_until(lambda: _job_in(hooks, row["job_id"], "retryable"))
    await _make_due(hooks.pool, row["job_id"])
    await _wait_delivery(hooks, delivery["id"], status="succeeded")
    assert (
        await hooks.pool.fetchval("SELECT failing_since FROM webhook_endpoint WHERE id = $1", endpoint_id)
        is None
    )


async def test_a_name_that_moves_to_a_private_address_is_refused_at_delivery(hooks: Hooks) -> None:
    hooks.resolver.names["merchant.example"] = ["93.184.216.34"]
    response = await hooks.shop.post(
        "/webhook-endpoints", {"url": "http://merchant.example/hook", "event_types": ["intent.settled"]}
    )
    assert response.status_code == 201, response.text
    endpoint_id = response.json()["id"]
    hooks.resolver.names["merchant.example"] = ["10.0.0.1"]
    await hooks.settled_intent()
    delivery = (await hooks.deliveries(endpoint_id))[0]
    row = await _wait_delivery(hooks, delivery["id"], status="retrying")
    assert row["last_status_code"] is None
    assert "address refused" in row["last_error"]
    assert "private" in row["last_error"]


async def test_a_hanging_endpoint_holds_only_its_own_slots(pool: asyncpg.Pool, database_url: str) -> None:
    hooks, http = await start_hooks(pool, database_url, webhook_concurrency=6, webhook_endpoint_concurrency=2)
    try:
        await hooks.endpoint("/hangs", mode="hang")
        await hooks.endpoint("/quick")
        intents = 3
        for _ in range(intents):
            await hooks.settled_intent()
        # Nine deliveries wait for the hanging endpoint, more than the queue's six slots; the other
        # endpoint's nine arrive while it hangs.
        await wait_until(lambda: _count(hooks, "/quick", 3 * intents))
        assert hooks.receiver.hanging == 2
        assert hooks.receiver.hanging_max == 2
        assert all(r.answered == 200 for r in hooks.receiver.received_on("/quick"))
    finally:
        hooks.receiver.release()
        await stop_hooks(hooks, http)


async def test_rotation_signs_with_both_secrets_during_the_grace_period(hooks: Hooks) -> None:
    endpoint_id, old = await hooks.endpoint("/rotating", types=["intent.settled"])
    rotated = await hooks.shop.post(f"/webhook-endpoints/{endpoint_id}/rotate-secret")
    assert rotated.status_code == 200, rotated.text
    new = rotated.json()["secret"]
    assert new != old
    assert rotated.json()["previous_secret_expires_at"] is not None
    hooks.receiver.set_path("/rotating", secrets=[old])
    hooks.receiver.set_path("/rotating-new", secrets=[new])
    await hooks.settled_intent()
    await wait_until(lambda: _count(hooks, "/rotating", 1))
    assert hooks.receiver.received_on("/rotating")[0].verified is True
    signed = await hooks.pool.fetchval(
        "SELECT previous_secret_expires_at > now() FROM webhook_endpoint WHERE id = $1", endpoint_id
    )
    assert signed is True


async def test_the_signature_header_carries_one_v1_per_live_secret(hooks: Hooks) -> None:
    from paymanager.application.webhooks.deliver import secrets_of
    from paymanager.application.webhooks.store import WebhookStore

    endpoint_id, old = await hooks.endpoint("/two", types=["intent.settled"])
    new = (await hooks.shop.post(f"/webhook-endpoints/{endpoint_id}/rotate-secret")).json()["secret"]
    await hooks.settled_intent()
    delivery = (await hooks.deliveries(endpoint_id))[0]
    async with hooks.pool.acquire() as conn:
        work = await WebhookStore(conn).load_delivery(delivery_id=delivery["id"])
    assert work is not None
    assert secrets_of(hooks.payments.box, work, hooks.payments) == [new, old]
    hooks.clock.now = datetime.now(UTC) + timedelta(
        seconds=hooks.payments.settings.webhook_secret_grace_sec + 1
    )
    assert secrets_of(hooks.payments.box, work, hooks.payments) == [new]
    assert SIGNATURE_HEADER == "Paymanager-Signature"
    assert parse_header("t=1,v1=a,v1=b") == (1, ["a", "b"])
