"""What only the PostgreSQL ledger offers: the caller's transaction, shared batches, bounded expiry."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from paymanager.ledger import (
    AMOUNT_MAX,
    BALANCE_MAX,
    Account,
    AccountFlags,
    CreateTransferResult,
    LedgerConflictError,
    PostgresLedger,
    Transfer,
    TransferFlags,
    open_ledger,
)
from tests.integration.ledger.conftest import FakeClock
from tests.support.waiting import wait_for_lock_waiters, wait_until

TR = CreateTransferResult
F = TransferFlags


async def make_accounts(ledger: PostgresLedger, *ids: int) -> None:
    results = await ledger.create_accounts([Account(i, ledger=1, code=1) for i in ids])
    assert all(r.ok for r in results)


class Boom(Exception):
    pass


async def test_a_batch_on_the_callers_connection_commits_and_rolls_back_with_its_transaction(
    pool: asyncpg.Pool,
) -> None:
    ledger = PostgresLedger(pool)
    await make_accounts(ledger, 1, 2)

    async def transfer_then_fail(conn: asyncpg.Connection) -> None:
        async with conn.transaction():
            results = await ledger.create_transfers([Transfer(10, 1, 2, 5, ledger=1, code=1)], conn=conn)
            assert results[0].result is TR.created
            raise Boom

    async with pool.acquire() as conn:
        with pytest.raises(Boom):
            await transfer_then_fail(conn)
        assert await ledger.lookup_transfers([10]) == []
        async with conn.transaction():
            await ledger.create_transfers([Transfer(11, 1, 2, 7, ledger=1, code=1)], conn=conn)
            # Uncommitted: another connection does not see it yet.
            assert await ledger.lookup_transfers([11]) == []
    (account,) = await ledger.lookup_accounts([2])
    assert account.credits_posted == 7


async def test_concurrent_calls_share_batches_yet_keep_their_own_results_and_chains(
    pool: asyncpg.Pool,
) -> None:
    ledger = PostgresLedger(pool, batches_in_flight=1)
    await make_accounts(ledger, 1, 2)
    linked = TransferFlags.LINKED

    def request(n: int) -> list[Transfer]:
        base = 100 * (n + 1)
        if n % 3 == 0:  # a chain left open at the end of this request: it fails alone
            return [
                Transfer(base, 1, 2, 1, ledger=1, code=1, flags=linked),
                Transfer(base + 1, 1, 2, 1, ledger=1, code=1, flags=linked),
            ]
        return [
            Transfer(base, 1, 2, 1, ledger=1, code=1, flags=linked),
            Transfer(base + 1, 1, 2, 1, ledger=1, code=1),
        ]

    outcomes = await asyncio.gather(*(ledger.create_transfers(request(n)) for n in range(30)))
    for n, results in enumerate(outcomes):
        expected = (
            [TR.linked_event_failed, TR.linked_event_chain_open] if n % 3 == 0 else [TR.created, TR.created]
        )
        assert [r.result for r in results] == expected, n
    (account,) = await ledger.lookup_accounts([2])
    assert account.credits_posted == 2 * 20


async def test_a_caller_cancelled_while_its_request_waits_for_a_batch_moves_no_money(
    pool: asyncpg.Pool,
) -> None:
    # One batch in flight, held up by a lock on the payer's account: the second call waits in the
    # queue. Its caller gives up (cancelled: a client disconnect, a timeout); the money must not move
    # afterwards behind its back, while the first caller still gets its own result.
    ledger = PostgresLedger(pool, batches_in_flight=1)
    await make_accounts(ledger, 1, 2)
    async with pool.acquire() as blocker:
        tx = blocker.transaction()
        await tx.start()
        await blocker.execute("SELECT 1 FROM ledger_account WHERE id = $1 FOR UPDATE", f"{1:032x}")
        first = asyncio.create_task(ledger.create_transfers([Transfer(10, 1, 2, 5, ledger=1, code=1)]))
        await wait_for_lock_waiters(pool)  # the first batch waits on the account lock
        second = asyncio.create_task(ledger.create_transfers([Transfer(11, 1, 2, 7, ledger=1, code=1)]))

        async def second_queued() -> bool:
            return len(ledger._waiting) == 1

        await wait_until(second_queued)  # behind the running batch
        second.cancel()
        with pytest.raises(asyncio.CancelledError):
            await second
        await tx.rollback()
    assert [r.result for r in await first] == [TR.created]
    await ledger.close()
    assert [t.id for t in await ledger.lookup_transfers([10, 11])] == [10]
    assert (await ledger.balance(2)).posted == 5
    assert (await ledger.verify()).ok


async def test_expire_pending_releases_at_most_limit_per_call(pool: asyncpg.Pool) -> None:
    clock = FakeClock()
    ledger = PostgresLedger(pool, clock=clock)
    await make_accounts(ledger, 1, 2)
    pending = [
        Transfer(10 + i, 1, 2, 3, ledger=1, code=1, timeout=1, flags=TransferFlags.PENDING) for i in range(5)
    ]
    assert all(r.ok for r in await ledger.create_transfers(pending))
    assert await ledger.expire_pending(limit=10) == 0
    clock.advance(2)
    assert await ledger.expire_pending(limit=3) == 3
    assert await ledger.expire_pending(limit=3) == 2
    (debit,) = await ledger.lookup_accounts([1])
    assert debit.debits_pending == 0
    assert (await ledger.verify()).ok


async def test_open_ledger_gives_a_reachable_postgres_ledger(pool: asyncpg.Pool) -> None:
    ledger = await open_ledger("postgres", pool=pool)
    await ledger.ping()
    assert isinstance(ledger, PostgresLedger)


async def test_verify_reports_a_pending_transfer_without_its_state_and_a_dangling_account(
    pool: asyncpg.Pool,
) -> None:
    ledger = PostgresLedger(pool)
    await make_accounts(ledger, 1, 2)
    await ledger.create_transfers([Transfer(10, 1, 2, 4, ledger=1, code=1, flags=TransferFlags.PENDING)])
    assert (await ledger.verify()).ok
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("DELETE FROM ledger_pending")
        await conn.execute("UPDATE ledger_account SET debits_pending = 0, credits_pending = 0")
        # An account number no account has (transfers store numbers, migration 0802).
        await conn.execute("UPDATE ledger_transfer SET credit_account_number = 999999999")
    verification = await ledger.verify()
    assert not verification.ok
    text = "\n".join(verification.violations)
    assert "pending transfer 10: missing or inconsistent pending state" in text
    assert "transfer 10: refers to an account that does not exist" in text


async def test_two_processes_on_the_same_nanosecond_still_get_unique_timestamps(pool: asyncpg.Pool) -> None:
    start = FakeClock().now_ns
    first = PostgresLedger(pool, clock=FakeClock(start))
    await make_accounts(first, 1, 2)  # takes the nanoseconds start and start + 1
    a = await first.create_transfers([Transfer(10, 1, 2, 1, ledger=1, code=1)])
    assert a[0].timestamp == start + 2
    # A second process whose clock reads that very nanosecond collides on the unique index, then
    # jumps ahead and succeeds.
    second = PostgresLedger(pool, clock=FakeClock(start + 2))
    b = await second.create_transfers([Transfer(11, 1, 2, 1, ledger=1, code=1)])
    assert b[0].result is TR.created
    assert b[0].timestamp > a[0].timestamp


async def test_a_batch_without_savepoint_leaves_a_conflict_to_the_callers_retry(pool: asyncpg.Pool) -> None:
    start = FakeClock().now_ns
    first = PostgresLedger(pool, clock=FakeClock(start))
    await make_accounts(first, 1, 2)
    await first.create_transfers([Transfer(10, 1, 2, 1, ledger=1, code=1)])  # nanosecond start + 2
    second = PostgresLedger(pool, clock=FakeClock(start + 2))
    transfer = Transfer(11, 1, 2, 1, ledger=1, code=1)
    # The collision aborts the caller's transaction (no savepoint to undo only the batch): the
    # ledger says so, and has moved its clock past the taken nanoseconds for the caller's retry.
    with pytest.raises(LedgerConflictError):
        async with pool.acquire() as conn, conn.transaction():
            await second.create_transfers([transfer], conn=conn, savepoint=False)
    async with pool.acquire() as conn, conn.transaction():
        results = await second.create_transfers([transfer], conn=conn, savepoint=False)
    assert results[0].result is TR.created
    assert (await second.lookup_transfers([11]))[0].timestamp > start + 2


async def test_racing_batches_with_one_id_and_different_accounts_create_it_once(pool: asyncpg.Pool) -> None:
    # Different accounts mean no common lock: the unique index decides, and the loser retries.
    ledger = PostgresLedger(pool, coalesce=False)
    await make_accounts(ledger, 1, 2, 3, 4)
    for n in range(15):
        transfer_id = 1000 + n
        outcomes = await asyncio.gather(
            ledger.create_transfers([Transfer(transfer_id, 1, 2, 1, ledger=1, code=1)]),
            ledger.create_transfers([Transfer(transfer_id, 3, 4, 1, ledger=1, code=1)]),
        )
        got = sorted(r[0].result.name for r in outcomes)
        assert got == ["created", "exists_with_different_debit_account_id"]
    assert (await ledger.verify()).ok


async def test_one_id_is_never_both_burned_by_a_transient_failure_and_created(pool: asyncpg.Pool) -> None:
    # Two batches use one new id with disjoint accounts, so no account lock orders them: one fails
    # transiently (exceeds_credits burns the id in ledger_transfer_failed), the other creates it.
    # TigerBeetle applies one first and the other answers id_already_failed or
    # exists_with_different_*; so must we (a transaction lock per new id), not commit both.
    ledger = PostgresLedger(pool, coalesce=False)
    limited = Account(1, ledger=1, code=1, flags=AccountFlags.DEBITS_MUST_NOT_EXCEED_CREDITS)
    assert all(r.ok for r in await ledger.create_accounts([limited]))
    await make_accounts(ledger, 2, 3, 4)
    async with pool.acquire() as blocker:
        tx = blocker.transaction()
        await tx.start()
        for account_id in (1, 3):
            await blocker.execute(
                "SELECT 1 FROM ledger_account WHERE id = $1 FOR UPDATE", f"{account_id:032x}"
            )
        refused = asyncio.create_task(ledger.create_transfers([Transfer(99, 1, 2, 5, ledger=1, code=1)]))
        created = asyncio.create_task(ledger.create_transfers([Transfer(99, 3, 4, 5, ledger=1, code=1)]))
        await wait_for_lock_waiters(pool, count=2)  # both batches wait on their payer's lock
        await tx.rollback()
    outcomes = {(await refused)[0].result, (await created)[0].result}
    assert outcomes != {TR.exceeds_credits, TR.created}


async def test_batch_load_stays_on_the_indexes_after_ledger_transfer_grows(pool: asyncpg.Pool) -> None:
    """The plans a connection caches for ledger_batch_load while the tables are small must not
    scan them once they have grown (it did: a cached hash join over a sequential scan of
    ledger_transfer made every batch's cost grow with the table until the next ANALYZE)."""
    ledger = PostgresLedger(pool, coalesce=False)
    await make_accounts(ledger, 1, 2)
    plans: list[str] = []
    async with pool.acquire() as conn:
        next_id = 1000
        # Enough calls on one connection, while ledger_transfer is nearly empty, for PL/pgSQL to
        # settle on generic plans; then grow the table well past what those plans were made for.
        for size in [1] * 8 + [1000] * 3:
            batch = [Transfer(next_id + i, 1, 2, 1, ledger=1, code=1) for i in range(size)]
            next_id += size
            assert all(r.ok for r in await ledger.create_transfers(batch, conn=conn))
        await conn.execute(
            "LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0;"
            " SET auto_explain.log_nested_statements = on; SET client_min_messages = log"
        )

        def listener(_: object, message: asyncpg.PostgresLogMessage) -> None:
            plans.append(message.message)

        conn.add_log_listener(listener)
        try:
            batch = [Transfer(next_id + i, 1, 2, 1, ledger=1, code=1) for i in range(10)]
            assert all(r.ok for r in await ledger.create_transfers(batch, conn=conn))

            async def load_plan_logged() -> bool:
                return any("ledger_transfer AS t" in p for p in plans)

            await wait_until(load_plan_logged)  # the log messages come after the statement's result
        finally:
            conn.remove_log_listener(listener)
            await conn.execute("RESET ALL")
    load_plans = [p for p in plans if "ledger_transfer AS t" in p]
    assert load_plans, plans
    # Every partition of ledger_transfer is read through its index of ids (migration 0203).
    assert all("_id_key on ledger_transfer_p" in p for p in load_plans), load_plans
    assert not any("Seq Scan on ledger_transfer" in p for p in plans), plans
    # The transfers' account numbers join back to account ids through ledger_account_number_key.
    assert not any("Seq Scan on ledger_account" in p for p in plans), plans


# Each overflow check at its boundary (balances are bigint, so the bound is BALANCE_MAX): a transfer
# that brings the balance to exactly the bound is legal, one unit more answers that check's result.
# The accounts: 1 is the one that fills up, 2 received or gave its earlier funds, 3 and 4 are fresh.
_DEBIT, _CREDIT = (1, 2), (2, 1)


def _filling(side: tuple[int, int], transfer_id: int, amount: int, *, pending: bool = False) -> Transfer:
    """`amount` from (or into) account 1 from (or into) a fresh account `transfer_id - 8` (3 or 4)."""
    debit, credit = (1, transfer_id - 8) if side == _DEBIT else (transfer_id - 8, 1)
    flags = F.PENDING if pending else F(0)
    return Transfer(transfer_id, debit, credit, amount, ledger=1, code=1, flags=flags)


def _earlier(side: tuple[int, int], *, pending: bool) -> Transfer:
    return Transfer(10, *side, BALANCE_MAX - 5, ledger=1, code=1, flags=F.PENDING if pending else F(0))


OVERFLOW_BOUNDARIES = {
    # result: (the earlier transfer is pending, the next ones are pending, the side account 1 is on)
    TR.overflows_debits_pending: (True, True, _DEBIT),
    TR.overflows_credits_pending: (True, True, _CREDIT),
    TR.overflows_debits_posted: (False, False, _DEBIT),
    TR.overflows_credits_posted: (False, False, _CREDIT),
    TR.overflows_debits: (True, False, _DEBIT),
    TR.overflows_credits: (True, False, _CREDIT),
}


@pytest.mark.parametrize("result", list(OVERFLOW_BOUNDARIES), ids=lambda result: result.name)
async def test_a_transfer_filling_a_balance_exactly_to_its_bound_is_legal_and_one_more_overflows(
    pool: asyncpg.Pool, result: CreateTransferResult
) -> None:
    earlier_pending, pending, side = OVERFLOW_BOUNDARIES[result]
    ledger = PostgresLedger(pool, clock=FakeClock())
    await make_accounts(ledger, 1, 2, 3, 4)
    assert (await ledger.create_transfers([_earlier(side, pending=earlier_pending)]))[0].ok
    assert (await ledger.create_transfers([_filling(side, 11, 5, pending=pending)]))[0].ok
    (over,) = await ledger.create_transfers([_filling(side, 12, 1, pending=pending)])
    assert over.result is result


@pytest.mark.parametrize("side", [_DEBIT, _CREDIT], ids=["debits_posted", "credits_posted"])
async def test_posting_a_hold_that_fills_a_posted_balance_exactly_to_its_bound_is_legal(
    pool: asyncpg.Pool, side: tuple[int, int]
) -> None:
    ledger = PostgresLedger(pool, clock=FakeClock())
    await make_accounts(ledger, 1, 2, 3, 4)
    assert (await ledger.create_transfers([_earlier(side, pending=False)]))[0].ok
    assert (await ledger.create_transfers([_filling(side, 11, 5, pending=True)]))[0].ok
    post = Transfer(12, pending_id=11, amount=AMOUNT_MAX, flags=F.POST_PENDING_TRANSFER)
    assert (await ledger.create_transfers([post]))[0].result is TR.created
    (account,) = await ledger.lookup_accounts([1])
    assert BALANCE_MAX in (account.debits_posted, account.credits_posted)


@pytest.mark.parametrize(
    ("flags", "side", "result"),
    [
        (AccountFlags.DEBITS_MUST_NOT_EXCEED_CREDITS, _DEBIT, TR.exceeds_credits),
        (AccountFlags.CREDITS_MUST_NOT_EXCEED_DEBITS, _CREDIT, TR.exceeds_debits),
    ],
    ids=["exceeds_credits", "exceeds_debits"],
)
async def test_a_limited_account_may_spend_exactly_its_balance_and_not_one_unit_more(
    pool: asyncpg.Pool, flags: AccountFlags, side: tuple[int, int], result: CreateTransferResult
) -> None:
    ledger = PostgresLedger(pool, clock=FakeClock())
    await make_accounts(ledger, 2, 3, 4)
    assert (await ledger.create_accounts([Account(1, ledger=1, code=1, flags=flags)]))[0].ok
    # Funds of 100 the other way round: credits for a debit-limited account, debits for the other.
    funding = Transfer(10, *reversed(side), 100, ledger=1, code=1)
    assert (await ledger.create_transfers([funding]))[0].ok
    assert (await ledger.create_transfers([_filling(side, 11, 60, pending=True)]))[0].ok
    assert (await ledger.create_transfers([_filling(side, 12, 40)]))[0].ok
    (over,) = await ledger.create_transfers([Transfer(13, *side, 1, ledger=1, code=1)])
    assert over.result is result


async def test_unsigned_fields_past_the_signed_ranges_round_trip_and_filter(pool: asyncpg.Pool) -> None:
    # Stored as the same bits in integer / smallint columns (migration 0206): the largest values
    # come back unsigned, the history filters by such a code, and a code wider than u16 (which no
    # transfer can have) finds nothing rather than failing the smallint conversion.
    ledger = PostgresLedger(pool, clock=FakeClock())
    await make_accounts(ledger, 1, 2)
    wide = Transfer(
        id=7, debit_account_id=1, credit_account_id=2, amount=5, user_data_32=2**32 - 1, timeout=2**32 - 1,
        ledger=1, code=2**16 - 1, flags=F.PENDING,
    )  # fmt: skip
    assert [r.result for r in await ledger.create_transfers([wide])] == [TR.created]
    [stored] = await ledger.lookup_transfers([7])
    assert (stored.user_data_32, stored.timeout, stored.code, stored.flags) == (
        2**32 - 1,
        2**32 - 1,
        2**16 - 1,
        F.PENDING,
    )
    assert [t.id for t in await ledger.get_account_transfers(1, code=2**16 - 1)] == [7]
    assert await ledger.get_account_transfers(1, code=2**16) == []
