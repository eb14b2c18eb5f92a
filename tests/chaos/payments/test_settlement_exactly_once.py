"""Two outbox-worker processes settle 2,000 intents; one is killed with SIGKILL midway. Each intent
is still settled exactly once: one settlement row each, and ledger balances that add up."""

from __future__ import annotations

import asyncpg
import pytest

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

INTENTS = 2_000
PAYERS = 20
FUNDING = 1_000_000


async def test_killed_worker_does_not_make_any_intent_settle_twice(
    pool: asyncpg.Pool, database_url: str
) -> None:
    payments = (await build_components(pool, database_url)).payments
    async with pool.acquire() as conn:
        admin, _ = await create_service(conn, payments.box, "chaos-admin", admin=True)
        caller, _ = await create_service(conn, payments.box, "chaos-shop", admin=False)
    parties = await seed_parties(payments, caller, admin, PAYERS, FUNDING)
    await confirm_p2p_intents(payments, caller, parties, INTENTS)
    env = paymanager_env(
        database_url, WORKER_ROLES="outbox-worker", JOB_LEASE_MS="2000", JOB_HEARTBEAT_INTERVAL_MS="500",
        JOB_RESCUE_INTERVAL_MS="500", DB_POOL_MAX_SIZE="6", OUTBOX_BATCH_SIZE="50", OUTBOX_CONCURRENCY="20",
    )  # fmt: skip
    survivor, victims = PaymanagerProcess(env), [PaymanagerProcess(env)]
    try:
        assert await wait_settled(pool, INTENTS // 4, timeout_s=60) >= INTENTS // 4, survivor.output
        # SIGKILL a worker while it holds running jobs (settlement is fast enough that a kill at a
        # random moment can find it between groups): they keep their leases until they expire.
        assert await kill_holding(pool, env, victims, timeout_s=60) > 0
        settled = await wait_settled(pool, INTENTS, timeout_s=120)
        assert settled == INTENTS, survivor.output[-3000:]
        await wait_rescued(pool, victims, timeout_s=60)
    finally:
        for victim in victims:
            victim.close()
        assert survivor.terminate() == 0
        survivor.close()
    posted = await pool.fetchval(
        "SELECT count(*) FROM settlement s JOIN intent i ON i.id = s.intent_id "
        "WHERE i.channel = 'internal-p2p' AND s.outcome = 'posted'"
    )
    assert posted == INTENTS
    # The ledger agrees with the settlement rows: each intent's legs were posted exactly once (the
    # intents settle in shared transactions of up to OUTBOX_CONCURRENCY / 2 per claim).
    disagreeing = await pool.fetchval(
        "SELECT count(*) FROM intent AS i WHERE i.channel = 'internal-p2p' AND"
        " (SELECT count(*) FILTER (WHERE t.flags & 4 <> 0) * 10 + count(*) FILTER (WHERE t.flags & 8 <> 0)"
        "    FROM ledger_transfer AS t WHERE t.user_data_128 = i.id)"
        " <> CASE WHEN i.fee > 0 THEN 20 ELSE 10 END"
    )
    assert disagreeing == 0
    # The kill must have interrupted settlements for this test to mean anything: the jobs the victim
    # held were rescued after their leases expired and settled by the survivor.
    rescued = await pool.fetchval(
        "SELECT count(*) FROM job WHERE kind = 'intent.settle' AND stalled_count > 0"
    )
    assert rescued > 0
    fee = int(await pool.fetchval("SELECT fee FROM intent WHERE channel = 'internal-p2p' LIMIT 1"))
    per_account = INTENTS // PAYERS
    for payer, payee in zip(parties.payers, parties.payees, strict=True):
        assert await balance(payments.ledger, payee) == {
            "posted": per_account * AMOUNT,
            "pending": 0,
            "available": per_account * AMOUNT,
        }
        paid = per_account * (AMOUNT + fee)
        assert await balance(payments.ledger, payer) == {
            "posted": FUNDING - paid,
            "pending": 0,
            "available": FUNDING - paid,
        }
