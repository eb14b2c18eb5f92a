"""A three-replica TigerBeetle cluster on this machine (`make cluster` starts one by hand): payments keep
settling while one replica is killed with SIGKILL and restarted. Afterwards every confirmed intent
is final exactly once and TigerBeetle's balances equal the intents' sums."""

from __future__ import annotations

import os
from collections.abc import Iterator

import asyncpg
import pytest

from paymanager.application.ledger_ops import balance
from paymanager.application.services.use_cases import create_service
from tests.integration.payments.conftest import build_components
from tests.support.processes import PaymanagerProcess, paymanager_env
from tests.support.settlement_chaos import (
    AMOUNT,
    confirm_p2p_intents,
    count_p2p,
    seed_parties,
    wait_settled,
)
from tests.support.tigerbeetle_server import TigerBeetleCluster, find_binary

# Three replicas fault in 4.3 GiB before the run starts: slow on a busy machine.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

INTENTS = 400
PAYERS = 20
FUNDING = 1_000_000


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
    parties = await seed_parties(payments, caller, admin, PAYERS, FUNDING)
    await confirm_p2p_intents(payments, caller, parties, INTENTS)
    env = paymanager_env(
        database_url, WORKER_ROLES="outbox-worker", DB_POOL_MAX_SIZE="6", OUTBOX_BATCH_SIZE="20",
        OUTBOX_CONCURRENCY="10", LEDGER_BACKEND="tigerbeetle", TB_ADDRESS=cluster.address,
    )  # fmt: skip
    worker = PaymanagerProcess(env)
    try:
        assert await wait_settled(pool, INTENTS // 4, timeout_s=180) >= INTENTS // 4, worker.output[-3000:]
        # Kill a replica mid-run (the first is as likely as any to be the primary: view 0's).
        victim = cluster.replicas[0]
        victim.kill()
        during = await count_p2p(pool, "settled")
        assert await wait_settled(pool, during + INTENTS // 10, timeout_s=180) > during, "settling stopped"
        victim.start()
        victim.wait_listening()
        settled = await wait_settled(pool, INTENTS, timeout_s=240)
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
    for payer, payee in zip(parties.payers, parties.payees, strict=True):
        assert await balance(payments.ledger, payee) == {
            "posted": per_account * AMOUNT, "pending": 0, "available": per_account * AMOUNT,
        }  # fmt: skip
        paid = per_account * (AMOUNT + fee)
        assert await balance(payments.ledger, payer) == {
            "posted": FUNDING - paid, "pending": 0, "available": FUNDING - paid,
        }  # fmt: skip
    await components.close()
