"""Review findings on the PostgreSQL ledger under concurrency: coalesced calls, ids raced by two batches."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from paymanager.ledger import Account, AccountFlags, CreateTransferResult, PostgresLedger, Transfer

TR = CreateTransferResult
WAIT_STEPS_MAX = 500


async def wait_for_a_blocked_backend(pool: asyncpg.Pool, count: int = 1) -> None:
    """Until `count` backends of this database wait for a lock (batches stuck behind ours)."""
    for _ in range(WAIT_STEPS_MAX):
        waiting = await pool.fetchval(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE NOT l.granted AND a.datname = current_database()"
        )
        if waiting >= count:
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


async def test_one_id_is_never_both_burned_by_a_transient_failure_and_created(pool: asyncpg.Pool) -> None:
    # Two batches use one new id with disjoint accounts, so no account lock orders them: one fails
    # transiently (exceeds_credits burns the id in ledger_transfer_failed), the other creates it.
    # Before migration 0201 both committed; TigerBeetle applies one first and the other answers
    # id_already_failed or exists_with_different_*, and now so do we (a transaction lock per new id).
    ledger = PostgresLedger(pool, coalesce=False)
    limited = Account(1, ledger=1, code=1, flags=AccountFlags.DEBITS_MUST_NOT_EXCEED_CREDITS)
    assert all(r.ok for r in await ledger.create_accounts([limited]))
    assert all(r.ok for r in await ledger.create_accounts([Account(i, ledger=1, code=1) for i in (2, 3, 4)]))
    async with pool.acquire() as blocker:
        tx = blocker.transaction()
        await tx.start()
        for account_id in (1, 3):
            await blocker.execute(
                "SELECT 1 FROM ledger_account WHERE id = $1 FOR UPDATE", f"{account_id:032x}"
            )
        refused = asyncio.create_task(ledger.create_transfers([Transfer(99, 1, 2, 5, ledger=1, code=1)]))
        created = asyncio.create_task(ledger.create_transfers([Transfer(99, 3, 4, 5, ledger=1, code=1)]))
        await wait_for_a_blocked_backend(pool, count=2)
        await tx.rollback()
    outcomes = {(await refused)[0].result, (await created)[0].result}
    assert outcomes != {TR.exceeds_credits, TR.created}
