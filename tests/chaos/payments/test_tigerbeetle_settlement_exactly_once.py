"""On TigerBeetle: two outbox-worker processes settle 600 intents; one is killed with SIGKILL while
it holds settlement jobs (between any two steps of decide, apply, finish). Each intent is still
final exactly once: one settlement row and one decision each, its holds posted and never voided in
TigerBeetle, and TigerBeetle's balances equal the intents' sums."""

from __future__ import annotations

import asyncpg
import pytest

from paymanager.application.ids import transfer_id
from paymanager.application.ledger_ops import balance
from paymanager.application.services.use_cases import create_service
from tests.integration.payments.conftest import build_components
from tests.support.processes import PaymanagerProcess, paymanager_env
from tests.support.settlement_chaos import (
    AMOUNT,
    confirm_p2p_intents,
    kill_holding,
    seed_parties,
    wait_rescued,
    wait_settled,
)

pytestmark = pytest.mark.slow

INTENTS = 600
PAYERS = 20
FUNDING = 1_000_000


async def test_killed_worker_settles_every_intent_once_on_tigerbeetle(
    pool: asyncpg.Pool, database_url: str, tigerbeetle_address: str
) -> None:
    components = await build_components(
        pool, database_url, ledger_backend="tigerbeetle", tb_address=tigerbeetle_address
    )
    payments = components.payments
    async with pool.acquire() as conn:
        admin, _ = await create_service(conn, payments.box, "chaos-admin", admin=True)
        caller, _ = await create_service(conn, payments.box, "chaos-shop", admin=False)
    parties = await seed_parties(payments, caller, admin, PAYERS, FUNDING)
    await confirm_p2p_intents(payments, caller, parties, INTENTS)
    env = paymanager_env(
        database_url, WORKER_ROLES="outbox-worker", JOB_LEASE_MS="2000", JOB_HEARTBEAT_INTERVAL_MS="500",
        JOB_RESCUE_INTERVAL_MS="500", DB_POOL_MAX_SIZE="6", OUTBOX_BATCH_SIZE="50", OUTBOX_CONCURRENCY="20",
        LEDGER_BACKEND="tigerbeetle", TB_ADDRESS=tigerbeetle_address,
    )  # fmt: skip
    survivor, victims = PaymanagerProcess(env), [PaymanagerProcess(env)]
    try:
        assert await kill_holding(pool, env, victims, timeout_s=120) > 0
        settled = await wait_settled(pool, INTENTS, timeout_s=180)
        assert settled == INTENTS, survivor.output[-3000:]
        await wait_rescued(pool, victims, timeout_s=60)
    finally:
        for victim in victims:
            victim.close()
        assert survivor.terminate() == 0
        survivor.close()
    rows = await pool.fetch(
        "SELECT i.id, i.hold_id, s.outcome, d.action FROM intent i"
        " JOIN settlement s ON s.intent_id = i.id JOIN ledger_decision d ON d.intent_id = i.id"
        " WHERE i.channel = 'internal-p2p'"
    )
    assert len(rows) == INTENTS
    assert {(r["outcome"], r["action"]) for r in rows} == {("posted", "post")}
    ledger = payments.ledger
    for start in range(0, INTENTS, 100):
        part = rows[start : start + 100]
        posts = [transfer_id(r["hold_id"], f"post.{leg}") for r in part for leg in ("amount", "fee")]
        voids = [transfer_id(r["hold_id"], f"void.{leg}") for r in part for leg in ("amount", "fee")]
        assert len(await ledger.lookup_transfers(posts)) == len(posts)
        assert await ledger.lookup_transfers(voids) == []
    rescued = await pool.fetchval(
        "SELECT count(*) FROM job WHERE kind = 'intent.settle' AND stalled_count > 0"
    )
    assert rescued > 0
    fee = int(await pool.fetchval("SELECT fee FROM intent WHERE channel = 'internal-p2p' LIMIT 1"))
    assert fee > 0
    per_account = INTENTS // PAYERS
    for payer, payee in zip(parties.payers, parties.payees, strict=True):
        assert await balance(ledger, payee) == {
            "posted": per_account * AMOUNT, "pending": 0, "available": per_account * AMOUNT,
        }  # fmt: skip
        paid = per_account * (AMOUNT + fee)
        assert await balance(ledger, payer) == {
            "posted": FUNDING - paid, "pending": 0, "available": FUNDING - paid,
        }  # fmt: skip
    await components.close()
