"""Manual review resolved both ways: over `/admin/psp` (admin scope) and with `paymanager psp resolve`;
each resolution audited on the row and in `admin_audit` (a refused one writes no audit row), each
settles the intent once, and a wrong one changes nothing."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import orjson

from tests.integration.psp.conftest import PayoutApi
from tests.support.processes import paymanager_env, run_cli


async def _in_review(payouts: PayoutApi) -> tuple[str, str, str]:
    payer = await payouts.funded_account(100_000)
    payouts.sandbox.faults(manual_review_rate=1)
    intent_id = await payouts.payout(payer, 5_000)
    await payouts.wait_psp_state(intent_id, {"MANUAL_REVIEW"})
    return payer, intent_id, str((await payouts.tx(intent_id))["id"])


async def test_resolved_completed_over_http_posts_the_hold_and_is_audited(payouts: PayoutApi) -> None:
    payer, intent_id, tx_id = await _in_review(payouts)
    listed = await payouts.admin.get("/admin/psp?state=MANUAL_REVIEW")
    assert [row["id"] for row in listed.json()["data"]] == [tx_id]
    assert listed.json()["data"][0]["beneficiary"] == "******7890"
    forbidden = await payouts.client.post(f"/admin/psp/{tx_id}/resolve", {"completed": "BANK-1"})
    assert forbidden.status_code == 403
    both = await payouts.admin.post(f"/admin/psp/{tx_id}/resolve", {"completed": "BANK-1", "failed": "no"})
    assert both.status_code == 422, both.text
    assert (await payouts.tx(intent_id))["state"] == "MANUAL_REVIEW"

    resolved = await payouts.admin.post(f"/admin/psp/{tx_id}/resolve", {"completed": "BANK-1"})
    assert resolved.status_code == 200, resolved.text
    body = resolved.json()
    assert body["state"] == "COMPLETED"
    assert body["reference"] == "BANK-1"
    assert body["resolution"] == "completed: BANK-1"
    assert body["resolved_by"] == f"api:{payouts.admin.service_id}"
    assert body["resolved_at"] is not None
    intent = await payouts.intent(intent_id)
    assert intent["status"] == "settled"
    balance = await payouts.client.balance(payer)
    assert balance["posted"] == balance["available"] == 100_000 - 5_000 - intent["fee"]

    again = await payouts.admin.post(f"/admin/psp/{tx_id}/resolve", {"failed": "changed my mind"})
    assert again.status_code == 409, again.text
    assert (await payouts.intent(intent_id))["status"] == "settled"
    audit = await _audit(payouts, tx_id)
    assert [(a["actor"], a["via"], a["before"], a["after"]["state"]) for a in audit] == [
        (payouts.admin.service_id, "api", {"state": "MANUAL_REVIEW"}, "COMPLETED")
    ], "one audit row: the refused attempts wrote none"
    missing = await payouts.admin.get(f"/admin/psp/{uuid.uuid4()}")
    assert missing.status_code == 404


async def test_resolved_failed_with_the_cli_voids_the_hold(payouts: PayoutApi, database_url: str) -> None:
    payer, intent_id, tx_id = await _in_review(payouts)
    env = paymanager_env(database_url)
    shown = await asyncio.to_thread(run_cli, ["psp", "ls", "--state", "MANUAL_REVIEW"], env)
    assert shown.returncode == 0, shown.stderr
    assert tx_id in shown.stdout
    assert "1234567890" not in shown.stdout
    neither = await asyncio.to_thread(run_cli, ["psp", "resolve", tx_id], env)
    assert neither.returncode == 2
    result = await asyncio.to_thread(run_cli, ["psp", "resolve", tx_id, "--failed", "bank returned it"], env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "FAILED" in result.stdout
    intent = await payouts.intent(intent_id)
    assert intent["status"] == "failed"
    assert "bank returned it" in intent["failure_reason"]
    balance = await payouts.client.balance(payer)
    assert balance["posted"] == balance["available"] == 100_000
    row = await payouts.tx(intent_id)
    assert row["resolved_by"].startswith("cli:")
    assert row["resolution"] == "failed: bank returned it"
    second = await asyncio.to_thread(run_cli, ["psp", "resolve", tx_id, "--completed", "X"], env)
    assert second.returncode == 1
    assert "MANUAL_REVIEW" in second.stderr
    audit = await _audit(payouts, tx_id)
    assert [(a["via"], a["after"]["state"], a["after"]["resolution"]) for a in audit] == [
        ("cli", "FAILED", "failed: bank returned it")
    ]
    assert audit[0]["actor"] == row["resolved_by"]


async def _audit(payouts: PayoutApi, tx_id: str) -> list[dict[str, Any]]:
    async with payouts.payments.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT actor, via, before, after FROM admin_audit WHERE action = 'psp.resolve' AND target = $1",
            f"psp_tx:{tx_id}",
        )
    return [
        {k: orjson.loads(v) if isinstance(v, str) and k in ("before", "after") else v for k, v in r.items()}
        for r in rows
    ]
