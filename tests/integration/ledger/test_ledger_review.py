"""The PostgreSQL ledger against TigerBeetle's semantics where a review found it diverging (each test
failed before its fix, 2026-11-29): retried posts and voids compared with the pending transfer they
stand for, a broken chain's open end, failed posts' timestamps, pending transfers' posted overflow."""

from __future__ import annotations

import asyncpg

from paymanager.ledger import (
    AMOUNT_MAX,
    BALANCE_MAX,
    Account,
    CreateTransferResult,
    PostgresLedger,
    Transfer,
    TransferFlags,
)
from tests.integration.ledger.conftest import FakeClock

TR = CreateTransferResult
F = TransferFlags


async def make_accounts(ledger: PostgresLedger, *ids: int) -> None:
    results = await ledger.create_accounts([Account(i, ledger=1, code=1) for i in ids])
    assert all(r.ok for r in results)


async def test_a_post_with_amount_max_retried_over_a_partial_post_is_not_exists(pool: asyncpg.Pool) -> None:
    # TigerBeetle (post_or_void_pending_transfer_exists): a post with AMOUNT_MAX means "the full
    # pending amount", so over a stored partial post it answers exists_with_different_amount.
    ledger = PostgresLedger(pool, clock=FakeClock())
    await make_accounts(ledger, 1, 2)
    assert (await ledger.create_transfers([Transfer(10, 1, 2, 100, ledger=1, code=1, flags=F.PENDING)]))[0].ok
    partial = Transfer(11, pending_id=10, amount=60, flags=F.POST_PENDING_TRANSFER)
    assert (await ledger.create_transfers([partial]))[0].result is TR.created
    full = Transfer(11, pending_id=10, amount=AMOUNT_MAX, flags=F.POST_PENDING_TRANSFER)
    (result,) = await ledger.create_transfers([full])
    (credit,) = await ledger.lookup_accounts([2])
    # The caller is told its full capture is in place; only 60 of 100 was posted, 40 went back.
    assert credit.credits_posted == 60
    assert result.result is TR.exists_with_different_amount


async def test_a_post_retried_without_the_user_data_it_set_is_not_exists(pool: asyncpg.Pool) -> None:
    # TigerBeetle: a zero user_data in the retry stands for the pending transfer's, which must then
    # equal the stored post's.
    ledger = PostgresLedger(pool, clock=FakeClock())
    await make_accounts(ledger, 1, 2)
    assert (await ledger.create_transfers([Transfer(10, 1, 2, 100, ledger=1, code=1, flags=F.PENDING)]))[0].ok
    post = Transfer(11, pending_id=10, amount=AMOUNT_MAX, user_data_128=7, flags=F.POST_PENDING_TRANSFER)
    assert (await ledger.create_transfers([post]))[0].result is TR.created
    retry = Transfer(11, pending_id=10, amount=AMOUNT_MAX, flags=F.POST_PENDING_TRANSFER)
    (result,) = await ledger.create_transfers([retry])
    assert result.result is TR.exists_with_different_user_data_128


async def test_a_broken_chain_still_answers_chain_open_for_a_linked_last_event(pool: asyncpg.Pool) -> None:
    # TigerBeetle checks `index == events.len - 1` for a linked event before `chain_broken`.
    ledger = PostgresLedger(pool, clock=FakeClock())
    await make_accounts(ledger, 1, 2)
    results = await ledger.create_transfers(
        [
            Transfer(10, 1, 1, 1, ledger=1, code=1, flags=F.LINKED),  # accounts_must_be_different
            Transfer(11, 1, 2, 1, ledger=1, code=1, flags=F.LINKED),
        ]
    )
    assert [r.result for r in results] == [TR.accounts_must_be_different, TR.linked_event_chain_open]


async def test_a_failed_post_reports_timestamp_zero_like_every_other_failure(pool: asyncpg.Pool) -> None:
    # types.AccountEventResult: "timestamp ... 0 for a failure".
    ledger = PostgresLedger(pool, clock=FakeClock())
    await make_accounts(ledger, 1, 2)
    results = await ledger.create_transfers(
        [
            Transfer(10, pending_id=99, amount=AMOUNT_MAX, flags=F.POST_PENDING_TRANSFER),
            Transfer(11, 1, 1, 1, ledger=1, code=1),
        ]
    )
    assert [r.result for r in results] == [TR.pending_transfer_not_found, TR.accounts_must_be_different]
    assert [r.timestamp for r in results] == [0, 0]


async def test_a_pending_transfer_checks_the_posted_overflow_too(pool: asyncpg.Pool) -> None:
    # TigerBeetle checks overflows_debits_posted for pending transfers as well (a post may add it).
    ledger = PostgresLedger(pool, clock=FakeClock())
    await make_accounts(ledger, 1, 2, 3)
    assert (await ledger.create_transfers([Transfer(10, 1, 2, BALANCE_MAX - 5, ledger=1, code=1)]))[0].ok
    (result,) = await ledger.create_transfers([Transfer(11, 1, 3, 10, ledger=1, code=1, flags=F.PENDING)])
    assert result.result is TR.overflows_debits_posted
