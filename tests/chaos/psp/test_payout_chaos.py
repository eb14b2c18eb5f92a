"""Two psp-worker processes drive payouts through a sandbox PSP that misbehaves at random (errors,
accepted-then-timed-out transfers, slow answers, processing that completes later, rejections,
statuses no driver knows), and one worker is killed -9 and replaced halfway.

Whatever happens: no transfer is ever sent twice, the ledger verifies, every payout ends (settled
or failed, matching its PSP transaction) or waits in MANUAL_REVIEW with its hold kept, and a settled
payout is one the PSP completed. `CHAOS_SCALE` (default 1) multiplies the payouts (12 gives 480)."""

from __future__ import annotations

import os

import asyncpg
import pytest

from paymanager.adapters.secret_box import SecretBox
from paymanager.application.psp.config import set_config
from tests.integration.psp.conftest import StartPayoutApi
from tests.integration.psp.test_worker_crash import psp_worker
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

SCALE = max(1, int(os.environ.get("CHAOS_SCALE", "1")))
PAYOUTS = 40 * SCALE
FAULTS = {
    "error_rate": 0.08,
    "accept_then_timeout_rate": 0.08,
    "hang_ms": 1_500,
    "latency_ms": 5,
    "latency_jitter_ms": 40,
    "in_progress_polls": 2,
    "in_progress_rate": 0.2,
    "failure_rate": 0.08,
    "manual_review_rate": 0.03,
}


async def test_two_workers_and_random_faults_never_pay_twice(
    start_payout_api: StartPayoutApi, pool: asyncpg.Pool, database_url: str
) -> None:
    api = await start_payout_api(worker_roles="api,outbox-worker")
    await set_config(pool, SecretBox.from_config(None), "ipps", api.sandbox.config("ipps", timeout_ms=500))
    payer = await api.funded_account(PAYOUTS * 2_000 + 1_000_000)
    api.sandbox.faults(**FAULTS)
    env = {"PSP_MAX_RETRIES": "4", "PSP_CONCURRENCY": "16"}
    workers = [psp_worker(database_url, **env), psp_worker(database_url, **env)]
    try:
        ids = []
        for index in range(PAYOUTS):
            ids.append(await api.payout(payer, 1_000 + index))
            if index == PAYOUTS // 2:
                workers[0].kill()
                workers[0].close()
                workers[0] = psp_worker(database_url, **env)

        async def all_done() -> bool:
            open_count = await pool.fetchval(
                "SELECT count(*) FROM psp_tx t JOIN intent i ON i.id = t.intent_id"
                " WHERE NOT (t.state = 'MANUAL_REVIEW' OR i.status IN ('settled', 'failed'))"
            )
            return int(open_count) == 0

        await wait_until(all_done, timeout_s=120 * SCALE)
    finally:
        for worker in workers:
            worker.close()
    submissions = api.sandbox.submissions()
    assert submissions, "the sandbox received transfers"
    assert max(submissions.values()) == 1, {k: v for k, v in submissions.items() if v > 1}
    rows = await pool.fetch(
        "SELECT t.id, t.state, i.status FROM psp_tx t JOIN intent i ON i.id = t.intent_id"
    )
    assert len(rows) == PAYOUTS
    transfers = api.sandbox.state.transfers
    for row in rows:
        pair = (row["state"], row["status"])
        assert pair in {("COMPLETED", "settled"), ("FAILED", "failed"), ("MANUAL_REVIEW", "confirmed")}, pair
        sent = transfers.get(("ipps", str(row["id"])))
        if row["status"] == "settled":
            assert sent is not None
            assert sent.status == "completed"
        if row["state"] == "FAILED" and sent is not None:
            assert sent.status == "failed"
    verification = await api.components.ledger.verify()
    assert verification.ok, verification.violations
    states = {row["state"] for row in rows}
    assert "COMPLETED" in states
