"""Review findings on the PostgreSQL ledger's coalescing of concurrent `create_transfers` calls."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from paymanager.ledger import Account, CreateTransferResult, PostgresLedger, Transfer

TR = CreateTransferResult
WAIT_STEPS_MAX = 500


async def wait_for_a_blocked_backend(pool: asyncpg.Pool) -> None:
    """Until some backend of this database waits for a lock (the first batch is stuck behind ours)."""
    for _ in range(WAIT_STEPS_MAX):
        waiting = await pool.fetchval(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE NOT l.granted AND a.datname = current_database()"
        )
        if waiting:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the first batch never blocked on the account lock")


async def test_a_caller_cancelled_while_its_request_waits_for_a_batch_moves_no_money(
    pool: asyncpg.Pool,
) -> None:
    # One batch in flight, held up by a lock on the payer's account: the second call waits in the
    # queue. Its caller gives up (cancelled: a client disconnect, a timeout); the money must not move
    # afterwards behind its back, while the first caller still gets its own result.
    ledger = PostgresLedger(pool, batches_in_flight=1)
    assert all(r.ok for r in await ledger.create_accounts([Account(i, ledger=1, code=1) for i in (1, 2)]))
    async with pool.acquire() as blocker:
        tx = blocker.transaction()
        await tx.start()
        await blocker.execute("SELECT 1 FROM ledger_account WHERE id = $1 FOR UPDATE", f"{1:032x}")
        first = asyncio.create_task(ledger.create_transfers([Transfer(10, 1, 2, 5, ledger=1, code=1)]))
        await wait_for_a_blocked_backend(pool)
        second = asyncio.create_task(ledger.create_transfers([Transfer(11, 1, 2, 7, ledger=1, code=1)]))
        await asyncio.sleep(0)  # The second request is queued behind the running batch.
        second.cancel()
        with pytest.raises(asyncio.CancelledError):
            await second
        await tx.rollback()
    assert [r.result for r in await first] == [TR.created]
    await ledger.close()
    assert [t.id for t in await ledger.lookup_transfers([10, 11])] == [10]
    assert (await ledger.balance(2)).posted == 5
    assert (await ledger.verify()).ok
