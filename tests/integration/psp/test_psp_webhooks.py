"""`POST /webhooks/psp/{name}`: verified by the PSP's driver on the raw body, stored once per event id,
answered at once and applied by a job; forged, duplicated, reordered, unknown-PSP and non-positive
events change nothing."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest

from paymanager.adapters.psp._http import PspCredentials
from paymanager.adapters.psp.drivers import build_driver
from paymanager.adapters.psp.port import InvalidWebhookError
from paymanager.domain.psp import PspOutcome
from tests.integration.psp.conftest import PayoutApi
from tests.support.psp_sandboxes import Sandbox
from tests.support.waiting import wait_until


async def _post(api: PayoutApi, name: str, headers: dict[str, str], body: bytes) -> httpx.Response:
    return await api.http.post(f"/webhooks/psp/{name}", content=body, headers=headers)


async def _stuck_in_progress(api: PayoutApi) -> tuple[str, str]:
    payer = await api.funded_account(100_000)
    api.sandbox.faults(in_progress_polls=1_000_000)
    intent_id = await api.payout(payer, 5_000)
    await api.wait_psp_state(intent_id, {"IN_PROGRESS"})
    return intent_id, str((await api.tx(intent_id))["id"])


async def _processed(api: PayoutApi, event_id: str) -> str:
    found: list[str] = []

    async def done() -> bool:
        outcome = await api.payments.pool.fetchval(
            "SELECT outcome FROM psp_webhook_event WHERE event_id = $1", event_id
        )
        if outcome is not None:
            found.append(outcome)
        return bool(found)

    await wait_until(done, timeout_s=30)
    return found[0]


async def test_a_verified_completion_settles_and_its_repeats_and_stragglers_change_nothing(
    payouts: PayoutApi,
) -> None:
    intent_id, tx_id = await _stuck_in_progress(payouts)
    headers, body = payouts.sandbox.webhook("ipps", tx_id, status="completed", event_id="evt-1")

    forged = await _post(payouts, "ipps", headers, body.replace(b"5000", b"9000"))
    assert forged.status_code == 400, forged.text
    assert forged.json()["error"]["code"] == "invalid_webhook"
    unsigned = await _post(payouts, "ipps", {}, body)
    assert unsigned.status_code == 400
    unknown = await _post(payouts, "paypal", headers, body)
    assert unknown.status_code == 404
    assert await payouts.payments.pool.fetchval("SELECT count(*) FROM psp_webhook_event") == 0

    accepted = await _post(payouts, "ipps", headers, body)
    assert accepted.status_code == 200, accepted.text
    assert accepted.json()["duplicate"] is False
    assert await _processed(payouts, "evt-1") == "applied: COMPLETED"
    settled = await payouts.wait_status(intent_id, {"settled", "failed"})
    assert settled["status"] == "settled"

    repeated = await _post(payouts, "ipps", headers, body)
    assert repeated.status_code == 200
    assert repeated.json()["duplicate"] is True
    late_headers, late_body = payouts.sandbox.webhook("ipps", tx_id, status="processing", event_id="evt-0")
    late = await _post(payouts, "ipps", late_headers, late_body)
    assert late.status_code == 200
    assert (await _processed(payouts, "evt-0")).startswith("ignored")
    failed_headers, failed_body = payouts.sandbox.webhook("ipps", tx_id, status="failed", event_id="evt-2")
    assert (await _post(payouts, "ipps", failed_headers, failed_body)).status_code == 200
    assert (await _processed(payouts, "evt-2")).startswith("ignored")
    assert (await payouts.tx(intent_id))["state"] == "COMPLETED"
    assert (await payouts.intent(intent_id))["status"] == "settled"
    assert await payouts.payments.pool.fetchval("SELECT count(*) FROM psp_webhook_event") == 3
    async with payouts.payments.pool.acquire() as conn:
        settlements = await conn.fetchval(
            "SELECT count(*) FROM settlement WHERE intent_id = $1", uuid.UUID(intent_id)
        )
    assert settlements == 1


async def test_a_non_positive_amount_is_a_permanent_failure_of_the_event(payouts: PayoutApi) -> None:
    intent_id, tx_id = await _stuck_in_progress(payouts)
    headers, body = payouts.sandbox.webhook("ipps", tx_id, status="completed", event_id="evt-zero", amount=0)
    answered = await _post(payouts, "ipps", headers, body)
    assert answered.status_code == 200
    assert await _processed(payouts, "evt-zero") == "refused: non-positive amount"

    async def dead() -> bool:
        state = await payouts.payments.pool.fetchval(
            "SELECT state FROM job WHERE kind = 'psp.webhook' AND payload->>'event_id' = 'evt-zero'"
        )
        return state == "dead"

    await wait_until(dead, timeout_s=30)
    assert (await payouts.tx(intent_id))["state"] == "IN_PROGRESS"


@pytest.mark.parametrize("dialect", ["ipps", "qp", "wise"])
def test_each_driver_verifies_its_dialects_signature(psp_sandbox: Sandbox, dialect: str) -> None:
    driver = build_driver(dialect, PspCredentials.from_json(psp_sandbox.config(dialect)))
    reference = str(uuid.uuid4())
    headers, body = psp_sandbox.webhook(dialect, reference, status="completed", amount=1_250, event_id="e-1")
    event = driver.verify_webhook(headers, body)
    assert (event.event_id, event.reference, event.outcome, event.amount) == (
        "e-1",
        reference,
        PspOutcome.COMPLETED,
        1_250,
    )
    tampered = json.dumps({**json.loads(body), "extra": 1}).encode()
    with pytest.raises(InvalidWebhookError):
        driver.verify_webhook(headers, tampered)
    with pytest.raises(InvalidWebhookError):
        driver.verify_webhook({}, body)
