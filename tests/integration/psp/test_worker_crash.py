"""kill -9 of a psp-worker process between CONFIRM_PENDING committed and the PSP's answer: the next
worker inquires (never sends again), the sandbox counted one submission, the intent settles once."""

from __future__ import annotations

import uuid

import asyncpg

from paymanager.adapters.secret_box import SecretBox
from paymanager.application.psp.config import set_config
from tests.integration.psp.conftest import StartPayoutApi
from tests.support.processes import PaymanagerProcess, paymanager_env
from tests.support.waiting import wait_until

WORKER_ENV = {
    "WORKER_ROLES": "psp-worker",
    "PSP_NAMES": "ipps",
    "PSP_LEASE_SEC": "1",
    "PSP_RETRY_LEASE_SEC": "2",
    "PSP_POLL_INTERVAL_MS": "50",
    "JOB_RESCUE_INTERVAL_MS": "200",
}


def psp_worker(database_url: str, **extra: str) -> PaymanagerProcess:
    process = PaymanagerProcess(paymanager_env(database_url, **(WORKER_ENV | extra)))
    process.wait_for_line("psp-worker starting")
    return process


async def test_a_worker_killed_while_the_psp_holds_the_transfer_is_taken_over_by_inquiry(
    start_payout_api: StartPayoutApi, pool: asyncpg.Pool, database_url: str
) -> None:
    api = await start_payout_api(worker_roles="api,outbox-worker")
    # The driver of the doomed worker waits long for the answer the sandbox holds back.
    await set_config(pool, SecretBox.from_config(None), "ipps", api.sandbox.config("ipps", timeout_ms=30_000))
    api.sandbox.faults(accept_then_timeout_rate=1, hang_ms=20_000)
    payer = await api.funded_account(100_000)
    intent_id = await api.payout(payer, 7_000)
    tx_id = str((await api.tx(intent_id))["id"])

    first = psp_worker(database_url)
    try:

        async def waiting_on_the_psp() -> bool:
            row = await api.tx(intent_id)
            return row["state"] == "CONFIRM_PENDING" and api.sandbox.submissions().get(tx_id) == 1

        await wait_until(waiting_on_the_psp, timeout_s=30)
        first.kill()  # SIGKILL: no shutdown, no lease released
    finally:
        first.close()
    api.sandbox.faults(accept_then_timeout_rate=0)

    second = psp_worker(database_url)
    try:
        settled = await api.wait_status(intent_id, {"settled", "failed"})
    finally:
        second.close()
    assert settled["status"] == "settled"
    assert settled["psp"]["state"] == "COMPLETED"
    assert api.sandbox.submissions() == {tx_id: 1}
    async with pool.acquire() as conn:
        settlements = await conn.fetchval(
            "SELECT count(*) FROM settlement WHERE intent_id = $1", uuid.UUID(intent_id)
        )
        posted = await conn.fetchval(
            "SELECT outcome FROM settlement WHERE intent_id = $1", uuid.UUID(intent_id)
        )
    assert settlements == 1
    assert posted == "posted"
