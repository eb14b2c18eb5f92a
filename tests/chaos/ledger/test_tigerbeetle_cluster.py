"""A three-replica TigerBeetle cluster on this machine (`make cluster` starts one by hand): payments keep
settling while one replica is killed with SIGKILL and restarted. Afterwards every confirmed intent
is final exactly once and TigerBeetle's balances equal the intents' sums."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Iterator

import asyncpg
import pytest

from paymanager.application.accounts.use_cases import OpenAccount, open_account
from paymanager.application.context import Payments
from paymanager.application.intents.confirm import confirm_intent
from paymanager.application.intents.create import IntentRequest, create_intent
from paymanager.application.intents.events import Pending
from paymanager.application.intents.settle import settle
from paymanager.application.ledger_ops import balance
from paymanager.application.services.use_cases import ServiceIdentity, create_service
from paymanager.domain.channels import AccountKind
from tests.integration.payments.conftest import build_components
from tests.support.processes import PaymanagerProcess, paymanager_env
from tests.support.tigerbeetle_server import TigerBeetleCluster, find_binary

# Three replicas fault in 4.3 GiB before the run starts: slow on a busy machine.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

INTENTS = 400
PAYERS = 20
AMOUNT = 100
FUNDING = 1_000_000
BATCH = 100


async def _seed(
    payments: Payments, caller: ServiceIdentity, admin: ServiceIdentity
) -> tuple[list[uuid.UUID], list[uuid.UUID]]:
    payers, payees = [], []
    async with payments.pool.acquire() as conn, conn.transaction():
        for _ in range(PAYERS):
            payers.append(
                (await open_account(payments, conn, caller, OpenAccount(AccountKind.USER, "THB"))).id
            )
            payees.append(
                (await open_account(payments, conn, caller, OpenAccount(AccountKind.USER, "THB"))).id
            )
        for payer in payers:
            top_up = IntentRequest("admin-transfer", FUNDING, "THB", payee_account_id=payer)
            row = await create_intent(payments, conn, admin, top_up, [])
            await confirm_intent(payments, conn, admin, row.id, Pending())
            await settle(payments, conn, row.id, settled_by="test")
    return payers, payees


async def _create_and_confirm(
    payments: Payments, caller: ServiceIdentity, payers: list[uuid.UUID], payees: list[uuid.UUID]
) -> None:
    for start in range(0, INTENTS, BATCH):
        async with payments.pool.acquire() as conn, conn.transaction():
            for i in range(start, start + BATCH):
                request = IntentRequest("internal-p2p", AMOUNT, "THB", payers[i % PAYERS], payees[i % PAYERS])
                row = await create_intent(payments, conn, caller, request, [])
                await confirm_intent(payments, conn, caller, row.id, Pending())


async def _count(pool: asyncpg.Pool, status: str) -> int:
    return int(
        await pool.fetchval(
            "SELECT count(*) FROM intent WHERE channel = 'internal-p2p' AND status = $1", status
        )
    )


async def _wait_settled(pool: asyncpg.Pool, at_least: int, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    settled = await _count(pool, "settled")
    while settled < at_least and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        settled = await _count(pool, "settled")
    return settled


@pytest.fixture
def cluster() -> Iterator[TigerBeetleCluster]:
    binary = find_binary()
    if binary is None:
        message = "no tigerbeetle binary (TIGERBEETLE_BIN, PATH or ../shared/bin/tigerbeetle)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    started = TigerBeetleCluster(binary, replica_count=3, full_batches=False)
    try:
        yield started
    finally:
        started.close()


async def test_payments_settle_exactly_once_while_a_replica_is_killed_and_restarted(
    pool: asyncpg.Pool, database_url: str, cluster: TigerBeetleCluster
) -> None:
    components = await build_components(
        pool, database_url, ledger_backend="tigerbeetle", tb_address=cluster.address
    )
    payments = components.payments
    async with pool.acquire() as conn:
        admin, _ = await create_service(conn, payments.box, "chaos-admin", admin=True)
        caller, _ = await create_service(conn, payments.box, "chaos-shop", admin=False)
    payers, payees = await _seed(payments, caller, admin)
    await _create_and_confirm(payments, caller, payers, payees)
    env = paymanager_env(
        database_url, WORKER_ROLES="outbox-worker", DB_POOL_MAX_SIZE="6", OUTBOX_BATCH_SIZE="20",
        OUTBOX_CONCURRENCY="10", LEDGER_BACKEND="tigerbeetle", TB_ADDRESS=cluster.address,
    )  # fmt: skip
    worker = PaymanagerProcess(env)
    try:
        assert await _wait_settled(pool, INTENTS // 4, timeout_s=180) >= INTENTS // 4, worker.output[-3000:]
        # Kill a replica mid-run (the first is as likely as any to be the primary: view 0's).
        victim = cluster.replicas[0]
        victim.kill()
        during = await _count(pool, "settled")
        assert await _wait_settled(pool, during + INTENTS // 10, timeout_s=180) > during, "settling stopped"
        victim.start()
        victim.wait_listening()
        settled = await _wait_settled(pool, INTENTS, timeout_s=240)
        assert settled == INTENTS, worker.output[-3000:]
    finally:
        assert worker.terminate() == 0
        worker.close()
    rows = await pool.fetch(
        "SELECT s.outcome, d.action FROM intent i JOIN settlement s ON s.intent_id = i.id"
        " JOIN ledger_decision d ON d.intent_id = i.id WHERE i.channel = 'internal-p2p'"
    )
    assert len(rows) == INTENTS
    assert {(r["outcome"], r["action"]) for r in rows} == {("posted", "post")}
    fee = int(await pool.fetchval("SELECT fee FROM intent WHERE channel = 'internal-p2p' LIMIT 1"))
    per_account = INTENTS // PAYERS
    for payer, payee in zip(payers, payees, strict=True):
        assert await balance(payments.ledger, payee) == {
            "posted": per_account * AMOUNT, "pending": 0, "available": per_account * AMOUNT,
        }  # fmt: skip
        paid = per_account * (AMOUNT + fee)
        assert await balance(payments.ledger, payer) == {
            "posted": FUNDING - paid, "pending": 0, "available": FUNDING - paid,
        }  # fmt: skip
    await components.close()
