"""Two psp-worker processes drive payouts through the sandbox PSPs (IPPS, QP and Wise in turn), which
misbehave at random (errors, accepted-then-timed-out transfers, slow answers, processing that
completes later, an inquiry that does not see a transfer yet, rejections, statuses no driver knows),
and one worker is killed -9 and replaced halfway.

Whatever happens: no IPPS transfer is ever sent twice, and QP and Wise, sent again only under the
same key, hold one transfer per payout; the ledger verifies; every payout ends (settled or failed,
matching its PSP transaction) or waits in MANUAL_REVIEW with its hold kept; a settled payout is one
the PSP completed. `CHAOS_PSP_PAYOUTS` sets the payouts (`make chaos`: 500), else `CHAOS_SCALE`
(default 1) multiplies the 40 CI runs."""

from __future__ import annotations

import asyncio
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
PAYOUTS = int(os.environ.get("CHAOS_PSP_PAYOUTS", "0")) or 40 * SCALE
PSPS = ("ipps", "qp", "wise")
# Payouts created at once (each from its own payer, so their holds do not queue on one account row).
CREATING_AT_ONCE = 8
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
    "unseen_inquiries": 1,
}


async def test_two_workers_and_random_faults_never_pay_twice(
    start_payout_api: StartPayoutApi, pool: asyncpg.Pool, database_url: str
) -> None:
    api = await start_payout_api(worker_roles="api,outbox-worker", psp_names=",".join(PSPS))
    for psp in PSPS:
        await set_config(pool, SecretBox.from_config(None), psp, api.sandbox.config(psp, timeout_ms=500))
    payers = [await api.funded_account(PAYOUTS * 2_000 + 1_000_000) for _ in range(CREATING_AT_ONCE)]
    api.sandbox.faults(**FAULTS)
    env = {"PSP_MAX_RETRIES": "4", "PSP_CONCURRENCY": "16", "PSP_NAMES": ",".join(PSPS)}
    workers = [psp_worker(database_url, **env), psp_worker(database_url, **env)]
    try:
        for start in range(0, PAYOUTS, CREATING_AT_ONCE):
            indexes = range(start, min(start + CREATING_AT_ONCE, PAYOUTS))
            await asyncio.gather(*(
                api.payout(payers[n % CREATING_AT_ONCE], 1_000 + n, channel=f"{PSPS[n % len(PSPS)]}-transfer")
                for n in indexes
            ))  # fmt: skip
            if start <= PAYOUTS // 2 < start + CREATING_AT_ONCE:
                workers[0].kill()
                workers[0].close()
                workers[0] = psp_worker(database_url, **env)

        async def all_done() -> bool:
            open_count = await pool.fetchval(
                "SELECT count(*) FROM psp_tx t JOIN intent i ON i.id = t.intent_id"
                " WHERE NOT (t.state = 'MANUAL_REVIEW' OR i.status IN ('settled', 'failed'))"
            )
            return int(open_count) == 0

        await wait_until(all_done, timeout_s=3 * PAYOUTS)  # a bound on a stuck run, not a timing check
    finally:
        for worker in workers:
            worker.close()
    submissions = api.sandbox.submissions()
    assert submissions, "the sandbox received transfers"
    rows = await pool.fetch(
        "SELECT t.id, t.psp, t.idempotency_key, t.state, i.status"
        " FROM psp_tx t JOIN intent i ON i.id = t.intent_id"
    )
    assert len(rows) == PAYOUTS
    assert {row["psp"] for row in rows} == set(PSPS)
    ipps_sent = {str(row["id"]): submissions.get(str(row["id"]), 0) for row in rows if row["psp"] == "ipps"}
    assert max(ipps_sent.values()) == 1, {k: v for k, v in ipps_sent.items() if v > 1}
    transfers = api.sandbox.state.transfers
    # The sandbox keeps one transfer per PSP reference, however often it was sent: a transfer under
    # any reference but a payout's own (a second key for one payout) would be money sent twice.
    references = {
        row["id"]: (row["psp"], str(row["idempotency_key"] if row["psp"] == "wise" else row["id"]))
        for row in rows
    }
    assert set(transfers) <= set(references.values()), set(transfers) - set(references.values())
    for row in rows:
        pair = (row["state"], row["status"])
        assert pair in {("COMPLETED", "settled"), ("FAILED", "failed"), ("MANUAL_REVIEW", "confirmed")}, pair
        sent = transfers.get(references[row["id"]])
        if row["status"] == "settled":
            assert sent is not None
            assert sent.status == "completed"
        if row["state"] == "FAILED" and sent is not None:
            assert sent.status == "failed"
    verification = await api.components.ledger.verify()
    assert verification.ok, verification.violations
    states = {row["state"] for row in rows}
    assert "COMPLETED" in states
