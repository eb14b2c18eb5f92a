"""Concurrent batches from several processes on a few hot accounts stay correct."""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter

import asyncpg

from paymanager.ledger import Account, AccountFlags, PostgresLedger, Transfer
from tests.support.ledger_hammer import WALLETS

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
