"""Concurrent batches from several processes on a few hot accounts stay correct."""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter

import asyncpg

from paymanager.ledger import Account, AccountFlags, CreateTransferResult, PostgresLedger, Transfer
from tests.support.ledger_hammer import WALLETS
from tests.support.locks import wait_for_a_waiter_behind

PROCESSES = 4
BATCHES = 300
FUNDING = 1_000
SOURCE = 99


async def test_processes_hammering_hot_accounts_never_overdraw_and_conserve_money(
    database_url: str, pool: asyncpg.Pool
) -> None:
    offset = 1 << 100
    ledger = PostgresLedger(pool)
    limited = AccountFlags.DEBITS_MUST_NOT_EXCEED_CREDITS
    await ledger.create_accounts(
        [Account(offset + w, ledger=1, code=1, flags=limited) for w in WALLETS]
        + [Account(offset + SOURCE, ledger=1, code=1)]
    )
    funding = [
        Transfer(offset + 500 + w, offset + SOURCE, offset + w, FUNDING, ledger=1, code=1) for w in WALLETS
    ]
    assert all(r.ok for r in await ledger.create_transfers(funding))

    workers = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.support.ledger_hammer",
            database_url,
            str(offset),
            str(seed),
            str(BATCHES),
            stdout=asyncio.subprocess.PIPE,
        )
        for seed in range(PROCESSES)
    ]
    outputs = [await asyncio.wait_for(w.communicate(), timeout=120) for w in workers]
    assert [w.returncode for w in workers] == [0] * PROCESSES
    created = [i for out, _ in outputs for i in json.loads(out)]

    # Every accepted transfer was accepted once, and exists exactly once.
    assert len(created) > PROCESSES * BATCHES
    assert not [i for i, n in Counter(created).items() if n > 1]
    stored = await pool.fetchval("SELECT count(*) FROM ledger_transfer")
    assert stored == len(created) + len(funding)
    assert len(await ledger.lookup_transfers(created[:8000])) == min(len(created), 8000)

    # No wallet went below zero, and money only moved between wallets.
    wallets = await ledger.lookup_accounts([offset + w for w in WALLETS])
    for w in wallets:
        assert w.debits_pending + w.debits_posted <= w.credits_posted
        assert w.debits_pending == 0  # every hold was posted or voided in its own batch
    assert sum(w.credits_posted - w.debits_posted for w in wallets) == FUNDING * len(WALLETS)
    verification = await ledger.verify()
    assert verification.ok, verification.violations


async def test_a_batch_spending_a_balance_another_uncommitted_batch_spends_waits_and_is_refused(
    pool: asyncpg.Pool,
) -> None:
    """Accounts are locked for the whole batch (ledger_batch_load): the second reads the balance the
    first committed, not the one before it, so two spends of one balance cannot both pass."""
    ledger = PostgresLedger(pool)
    await ledger.create_accounts(
        [Account(1, ledger=1, code=1, flags=AccountFlags.DEBITS_MUST_NOT_EXCEED_CREDITS)]
    )
    await ledger.create_accounts([Account(i, ledger=1, code=1) for i in (2, 3, 4)])
    assert (await ledger.create_transfers([Transfer(10, 2, 1, 100, ledger=1, code=1)]))[0].ok
    async with pool.acquire() as first:
        transaction = first.transaction()
        await transaction.start()
        assert (await ledger.create_transfers([Transfer(11, 1, 3, 80, ledger=1, code=1)], conn=first))[0].ok
        second = asyncio.create_task(ledger.create_transfers([Transfer(12, 1, 4, 80, ledger=1, code=1)]))
        try:
            await wait_for_a_waiter_behind(pool, first.get_server_pid())
        finally:
            await transaction.commit()
    (refused,) = await second
    assert refused.result is CreateTransferResult.exceeds_credits
    (account,) = await ledger.lookup_accounts([1])
    assert (account.debits_posted, account.credits_posted) == (80, 100)
