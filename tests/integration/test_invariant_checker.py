"""The chaos suites' invariant checker (tests/support/invariants.py) finds what it is there to find:
quiet on a consistent database, and naming the rows and records of each kind of damage."""

from __future__ import annotations

import asyncpg

from paymanager.application.services.use_cases import create_service
from tests.integration.payments.conftest import build_components
from tests.support.invariants import SandboxRecords, check_whole_service
from tests.support.settlement_chaos import seed_parties


async def test_a_consistent_database_and_sandboxes_show_no_violation(
    pool: asyncpg.Pool, database_url: str
) -> None:
    payments = (await build_components(pool, database_url)).payments
    async with pool.acquire() as conn:
        admin, _ = await create_service(conn, payments.box, "admin", admin=True)
        shop, _ = await create_service(conn, payments.box, "shop", admin=False)
    await seed_parties(payments, shop, admin, 2, 1_000)
    records = SandboxRecords(
        psp_submissions={"tx": 1}, gift_balances={"GC-0": (1_000, 1_000)},
        card_counters={"leg.authorize": {"authorize_submissions": 2}},
    )  # fmt: skip

    findings = await check_whole_service(pool, records)

    assert findings.violations == []
    assert findings.figures["intents admin-transfer.settled"] == 2
    assert findings.figures["holds"] == 2


async def test_a_settled_intent_made_failed_is_named_twice(pool: asyncpg.Pool, database_url: str) -> None:
    payments = (await build_components(pool, database_url)).payments
    async with pool.acquire() as conn:
        admin, _ = await create_service(conn, payments.box, "admin", admin=True)
        shop, _ = await create_service(conn, payments.box, "shop", admin=False)
    await seed_parties(payments, shop, admin, 1, 1_000)
    async with pool.acquire() as conn, conn.transaction():
        # Past the transition trigger, as a bug writing the status behind the state machine would.
        await conn.execute("SET LOCAL session_replication_role = replica")
        damaged = await conn.fetchval("UPDATE intent SET status = 'failed' RETURNING id")

    findings = await check_whole_service(pool, SandboxRecords())

    assert findings.violations == [
        f"failed or cancelled intents with a hold posted: 1 ({damaged})",
        f"settlement rows that disagree with their intent: 1 ({damaged})",
    ]


async def test_what_the_sandboxes_saw_twice_or_never_is_named(pool: asyncpg.Pool) -> None:
    records = SandboxRecords(
        psp_submissions={"tx-once": 1, "tx-twice": 2},
        # A card debited with no leg using it, its balance short by the debit.
        gift_counters={"GC-1": {"debits_applied": 1}},
        gift_balances={"GC-1": (1_000, 700)},
        # A hold made and never captured nor released.
        card_counters={"leg-1.authorize": {"authorizations_applied": 1}},
        receipts=[
            {
                "path": "/a",
                "event_id": "evt_1",
                "verified": False,
                "answered": 400,
                "reason": "bad_signature",
            },
            {"path": "/a", "event_id": "evt_2", "verified": True, "answered": 200, "reason": None},
            {"path": "/a", "event_id": "evt_3", "verified": False, "answered": 400, "reason": "replayed"},
        ],
    )

    findings = await check_whole_service(pool, records)

    assert findings.violations == [
        "PSP transfers submitted more than once: 1 (tx-twice)",
        "gift cards whose balance disagrees with the captured legs: 1 (GC-1: 700 != 1000 - 0)",
        "gift cards debited more often than legs used them: 1 (GC-1)",
        "card authorisations not made once then captured or released once: 1"
        " (leg-1.authorize: made 1, captured 0, released 0)",
        "deliveries the receiver could not verify: 1 (/a:evt_1: bad_signature)",
        "deliveries received of no delivery row: 1 (/a:evt_2)",
    ]
