"""The conformance suite: TigerBeetle's semantics, run against every backend of the Ledger port."""

from __future__ import annotations

from dataclasses import replace

import asyncpg
import pytest

from paymanager.ledger import (
    AMOUNT_MAX,
    BALANCE_MAX,
    BATCH_MAX,
    Account,
    AccountFlags,
    AccountNotFoundError,
    BatchTooLargeError,
    CreateAccountResult,
    CreateTransferResult,
    LedgerError,
    PostgresLedger,
    SystemAccountMismatchError,
    Transfer,
    TransferFlags,
    account_id_for,
    ensure_accounts,
)
from tests.integration.ledger.conftest import Backend, FakeClock
from tests.support.waiting import wait_until

AR = CreateAccountResult
TR = CreateTransferResult
F = TransferFlags


async def accounts(b: Backend, *flags: int, code: int = 10) -> list[int]:
    """Create one account per flags value on the test's ledger; returns their ids."""
    made = [Account(id=b.new_id(), ledger=b.ledger_number, code=code, flags=f) for f in flags]
    results = await b.ledger.create_accounts(made)
    assert [r.result for r in results] == [AR.created] * len(made)
    return [a.id for a in made]


def xfer(b: Backend, debit: int, credit: int, amount: int, **fields: int) -> Transfer:
    values: dict[str, int] = {"ledger": b.ledger_number, "code": 1, **fields}
    values.setdefault("id", b.new_id())
    return Transfer(debit_account_id=debit, credit_account_id=credit, amount=amount, **values)


async def results(b: Backend, *transfers: Transfer) -> list[CreateTransferResult]:
    return [r.result for r in await b.ledger.create_transfers(list(transfers))]


async def postgres_ledger(pool: asyncpg.Pool, clock: FakeClock | None = None) -> PostgresLedger:
    """The PostgreSQL backend alone, on a fake clock, with accounts 1, 2 and 3 on ledger 1: for the
    cases of TigerBeetle's rules pinned on our own implementation of them, where they are easiest to
    get wrong (retries of posts, chain ends, failure timestamps, overflow of pending transfers)."""
    ledger = PostgresLedger(pool, clock=clock or FakeClock())
    results = await ledger.create_accounts([Account(i, ledger=1, code=1) for i in (1, 2, 3)])
    assert all(r.ok for r in results)
    return ledger


async def balances(b: Backend, account_id: int) -> tuple[int, int, int, int]:
    (a,) = await b.ledger.lookup_accounts([account_id])
    return a.debits_pending, a.debits_posted, a.credits_pending, a.credits_posted


async def test_account_creation_is_idempotent_and_compares_fields(backend: Backend) -> None:
    b = backend
    account = Account(id=b.new_id(), ledger=b.ledger_number, code=3, user_data_64=2**64 - 1)
    first = await b.ledger.create_accounts([account])
    again = await b.ledger.create_accounts([account])
    other = await b.ledger.create_accounts(
        [Account(id=account.id, ledger=b.ledger_number, code=4, user_data_64=2**64 - 1)]
    )
    assert first[0].result is AR.created
    assert first[0].timestamp > 0
    assert again[0].result is AR.exists
    assert again[0].timestamp == first[0].timestamp
    assert other[0].result is AR.exists_with_different_code
    (found,) = await b.ledger.lookup_accounts([account.id])
    assert (found.code, found.user_data_64, found.timestamp) == (3, 2**64 - 1, first[0].timestamp)


async def test_invalid_accounts_get_results_in_precedence_order(backend: Backend) -> None:
    b = backend
    both = AccountFlags.DEBITS_MUST_NOT_EXCEED_CREDITS | AccountFlags.CREDITS_MUST_NOT_EXCEED_DEBITS
    got = await b.ledger.create_accounts(
        [
            Account(id=0, ledger=0, code=0),
            Account(id=2**128 - 1, ledger=1, code=1),
            Account(id=b.new_id(), ledger=1, code=1, flags=both),
            Account(id=b.new_id(), ledger=1, code=1, credits_posted=5),
            Account(id=b.new_id(), ledger=0, code=0),
            Account(id=b.new_id(), ledger=1, code=0),
            Account(id=b.new_id(), ledger=1, code=1, timestamp=5),
        ]
    )
    assert [r.result for r in got] == [
        AR.id_must_not_be_zero,
        AR.id_must_not_be_int_max,
        AR.flags_are_mutually_exclusive,
        AR.credits_posted_must_be_zero,
        AR.ledger_must_not_be_zero,
        AR.code_must_not_be_zero,
        AR.timestamp_must_be_zero,
    ]


async def test_single_phase_transfer_moves_posted_balances_once(backend: Backend) -> None:
    b = backend
    debit, credit = await accounts(b, 0, 0)
    transfer = xfer(b, debit, credit, 250, user_data_128=7, user_data_64=8, user_data_32=9)
    first = await b.ledger.create_transfers([transfer])
    again = await b.ledger.create_transfers([transfer])
    assert first[0].result is TR.created
    assert again[0].result is TR.exists
    assert again[0].timestamp == first[0].timestamp
    assert await balances(b, debit) == (0, 250, 0, 0)
    assert await balances(b, credit) == (0, 0, 0, 250)
    (stored,) = await b.ledger.lookup_transfers([transfer.id])
    assert stored.amount == 250
    assert stored.timestamp == first[0].timestamp
    assert (stored.user_data_128, stored.user_data_64, stored.user_data_32) == (7, 8, 9)


async def test_repeated_id_with_different_fields_reports_the_first_difference(backend: Backend) -> None:
    b = backend
    debit, credit, third = await accounts(b, 0, 0, 0)
    transfer = xfer(b, debit, credit, 10, user_data_32=1)
    await b.ledger.create_transfers([transfer])
    changed = [
        xfer(b, debit, credit, 11, id=transfer.id, user_data_32=1),
        xfer(b, debit, third, 10, id=transfer.id, user_data_32=1),
        xfer(b, debit, credit, 10, id=transfer.id, user_data_32=2),
        xfer(b, debit, credit, 10, id=transfer.id, user_data_32=1, code=2),
        xfer(b, debit, credit, 11, id=transfer.id, user_data_32=1, flags=F.PENDING),
    ]
    assert await results(b, *changed) == [
        TR.exists_with_different_amount,
        TR.exists_with_different_credit_account_id,
        TR.exists_with_different_user_data_32,
        TR.exists_with_different_code,
        TR.exists_with_different_flags,
    ]


async def test_invalid_transfers_get_results_in_precedence_order(backend: Backend) -> None:
    b = backend
    debit, credit = await accounts(b, 0, 0)
    (elsewhere,) = [a.id for a in [Account(id=b.new_id(), ledger=b.ledger_number + 1, code=1)]]
    await b.ledger.create_accounts([Account(id=elsewhere, ledger=b.ledger_number + 1, code=1)])
    got = await results(
        b,
        xfer(b, debit, credit, 1, id=0),
        xfer(b, debit, credit, 1, flags=F.PENDING | F.POST_PENDING_TRANSFER),
        xfer(b, 0, credit, 1),
        xfer(b, debit, debit, 1),
        xfer(b, debit, credit, 1, pending_id=5),
        xfer(b, debit, credit, 1, timeout=5),
        xfer(b, debit, credit, 1, ledger=0),
        xfer(b, debit, credit, 1, code=0),
        xfer(b, b.new_id(), credit, 1),
        xfer(b, debit, b.new_id(), 1),
        xfer(b, debit, elsewhere, 1),
        xfer(b, debit, credit, 1, ledger=b.ledger_number + 1),
        xfer(b, debit, credit, 1, timestamp=1),
    )
    assert got == [
        TR.id_must_not_be_zero,
        TR.flags_are_mutually_exclusive,
        TR.debit_account_id_must_not_be_zero,
        TR.accounts_must_be_different,
        TR.pending_id_must_be_zero,
        TR.timeout_reserved_for_pending_transfer,
        TR.ledger_must_not_be_zero,
        TR.code_must_not_be_zero,
        TR.debit_account_not_found,
        TR.credit_account_not_found,
        TR.accounts_must_have_the_same_ledger,
        TR.transfer_must_have_the_same_ledger_as_accounts,
        TR.timestamp_must_be_zero,
    ]


async def test_transient_failure_burns_the_id(backend: Backend) -> None:
    b = backend
    limited, credit = await accounts(b, AccountFlags.DEBITS_MUST_NOT_EXCEED_CREDITS, 0)
    transfer = xfer(b, limited, credit, 5)
    assert await results(b, transfer) == [TR.exceeds_credits]
    await b.ledger.create_transfers([xfer(b, credit, limited, 100)])
    # Funds arrived, yet the same id keeps its failed outcome; a new id succeeds.
    assert await results(b, transfer) == [TR.id_already_failed]
    assert await results(b, xfer(b, limited, credit, 5)) == [TR.created]


async def test_a_transient_failure_burns_its_id_inside_a_linked_chain_that_is_undone(
    backend: Backend,
) -> None:
    """The chain is rolled back, yet the failed event's id stays failed; the other events' ids, whose
    results were only `linked_event_failed`, are free."""
    b = backend
    limited, source, credit = await accounts(b, AccountFlags.DEBITS_MUST_NOT_EXCEED_CREDITS, 0, 0)
    first = xfer(b, source, credit, 5, flags=F.LINKED)
    failing = xfer(b, limited, credit, 5)
    assert await results(b, first, failing) == [TR.linked_event_failed, TR.exceeds_credits]
    await b.ledger.create_transfers([xfer(b, source, limited, 100)])
    assert await results(b, first, failing) == [TR.linked_event_failed, TR.id_already_failed]
    assert await results(b, replace(first, flags=0)) == [TR.created]
    assert await balances(b, credit) == (0, 0, 0, 5)


async def test_debits_must_not_exceed_credits_counts_pending_debits(backend: Backend) -> None:
    b = backend
    wallet, source, sink = await accounts(b, AccountFlags.DEBITS_MUST_NOT_EXCEED_CREDITS, 0, 0)
    await b.ledger.create_transfers([xfer(b, source, wallet, 100)])
    got = await results(
        b,
        xfer(b, wallet, sink, 60, flags=F.PENDING),
        xfer(b, wallet, sink, 41),
        xfer(b, wallet, sink, 40),
    )
    assert got == [TR.created, TR.exceeds_credits, TR.created]
    assert await balances(b, wallet) == (60, 40, 0, 100)


async def test_credits_must_not_exceed_debits(backend: Backend) -> None:
    b = backend
    nostro, other = await accounts(b, AccountFlags.CREDITS_MUST_NOT_EXCEED_DEBITS, 0)
    assert await results(b, xfer(b, other, nostro, 1)) == [TR.exceeds_debits]
    assert await results(b, xfer(b, nostro, other, 10), xfer(b, other, nostro, 10)) == [TR.created] * 2


async def test_a_pending_transfer_checks_the_posted_overflow_too(pool: asyncpg.Pool) -> None:
    # TigerBeetle checks overflows_debits_posted for pending transfers as well (a post may add it).
    ledger = await postgres_ledger(pool)
    assert (await ledger.create_transfers([Transfer(10, 1, 2, BALANCE_MAX - 5, ledger=1, code=1)]))[0].ok
    (result,) = await ledger.create_transfers([Transfer(11, 1, 3, 10, ledger=1, code=1, flags=F.PENDING)])
    assert result.result is TR.overflows_debits_posted


async def test_linked_chain_fails_whole_and_later_events_still_apply(backend: Backend) -> None:
    b = backend
    wallet, source, sink = await accounts(b, AccountFlags.DEBITS_MUST_NOT_EXCEED_CREDITS, 0, 0)
    got = await results(
        b,
        xfer(b, source, wallet, 50, flags=F.LINKED),
        xfer(b, wallet, sink, 30, flags=F.LINKED),
        xfer(b, wallet, sink, 30),  # 60 > 50: the whole chain fails
        xfer(b, source, sink, 7),
    )
    assert got == [TR.linked_event_failed, TR.linked_event_failed, TR.exceeds_credits, TR.created]
    assert await balances(b, wallet) == (0, 0, 0, 0)
    assert await balances(b, sink) == (0, 0, 0, 7)


async def test_linked_chain_left_open_at_the_end_of_the_batch_fails(backend: Backend) -> None:
    b = backend
    debit, credit = await accounts(b, 0, 0)
    got = await results(
        b,
        xfer(b, debit, credit, 1),
        xfer(b, debit, credit, 1, flags=F.LINKED),
        xfer(b, debit, credit, 1, flags=F.LINKED),
    )
    assert got == [TR.created, TR.linked_event_failed, TR.linked_event_chain_open]
    assert await balances(b, debit) == (0, 1, 0, 0)


async def test_a_broken_chain_still_answers_chain_open_for_a_linked_last_event(pool: asyncpg.Pool) -> None:
    # TigerBeetle checks `index == events.len - 1` for a linked event before `chain_broken`.
    ledger = await postgres_ledger(pool)
    results = await ledger.create_transfers(
        [
            Transfer(10, 1, 1, 1, ledger=1, code=1, flags=F.LINKED),  # accounts_must_be_different
            Transfer(11, 1, 2, 1, ledger=1, code=1, flags=F.LINKED),
        ]
    )
    assert [r.result for r in results] == [TR.accounts_must_be_different, TR.linked_event_chain_open]


async def test_pending_then_post_of_the_full_amount_with_amount_max(backend: Backend) -> None:
    b = backend
    debit, credit = await accounts(b, 0, 0)
    pending = xfer(b, debit, credit, 500, flags=F.PENDING, user_data_64=42)
    assert await results(b, pending) == [TR.created]
    assert await balances(b, debit) == (500, 0, 0, 0)
    post = Transfer(id=b.new_id(), pending_id=pending.id, amount=AMOUNT_MAX, flags=F.POST_PENDING_TRANSFER)
    assert await results(b, post) == [TR.created]
    assert await balances(b, debit) == (0, 500, 0, 0)
    assert await balances(b, credit) == (0, 0, 0, 500)
    (stored,) = await b.ledger.lookup_transfers([post.id])
    assert (stored.amount, stored.debit_account_id, stored.ledger, stored.user_data_64) == (
        500,
        debit,
        b.ledger_number,
        42,
    )
    # Repeating the post answers `exists`; another post or a void of it is refused by name.
    assert await results(b, post) == [TR.exists]
    again = Transfer(id=b.new_id(), pending_id=pending.id, amount=AMOUNT_MAX, flags=F.POST_PENDING_TRANSFER)
    void = Transfer(id=b.new_id(), pending_id=pending.id, flags=F.VOID_PENDING_TRANSFER)
    assert await results(b, again, void) == [
        TR.pending_transfer_already_posted,
        TR.pending_transfer_already_posted,
    ]


async def test_partial_post_returns_the_remainder(backend: Backend) -> None:
    b = backend
    debit, credit = await accounts(b, 0, 0)
    pending = xfer(b, debit, credit, 500, flags=F.PENDING)
    too_much = Transfer(id=b.new_id(), pending_id=pending.id, amount=501, flags=F.POST_PENDING_TRANSFER)
    partial = Transfer(id=b.new_id(), pending_id=pending.id, amount=200, flags=F.POST_PENDING_TRANSFER)
    assert await results(b, pending, too_much, partial) == [
        TR.created,
        TR.exceeds_pending_transfer_amount,
        TR.created,
    ]
    assert await balances(b, debit) == (0, 200, 0, 0)
    assert await balances(b, credit) == (0, 0, 0, 200)


async def test_a_post_with_amount_max_retried_over_a_partial_post_is_not_exists(pool: asyncpg.Pool) -> None:
    # TigerBeetle (post_or_void_pending_transfer_exists): a post with AMOUNT_MAX means "the full
    # pending amount", so over a stored partial post it answers exists_with_different_amount; the
    # caller must not be told its full capture is in place when only part of it was posted.
    ledger = await postgres_ledger(pool)
    assert (await ledger.create_transfers([Transfer(10, 1, 2, 100, ledger=1, code=1, flags=F.PENDING)]))[0].ok
    partial = Transfer(11, pending_id=10, amount=60, flags=F.POST_PENDING_TRANSFER)
    assert (await ledger.create_transfers([partial]))[0].result is TR.created
    full = Transfer(11, pending_id=10, amount=AMOUNT_MAX, flags=F.POST_PENDING_TRANSFER)
    (result,) = await ledger.create_transfers([full])
    (credit,) = await ledger.lookup_accounts([2])
    assert credit.credits_posted == 60
    assert result.result is TR.exists_with_different_amount


async def test_a_post_retried_without_the_user_data_it_set_is_not_exists(pool: asyncpg.Pool) -> None:
    # TigerBeetle: a zero user_data in the retry stands for the pending transfer's, which must then
    # equal the stored post's.
    ledger = await postgres_ledger(pool)
    assert (await ledger.create_transfers([Transfer(10, 1, 2, 100, ledger=1, code=1, flags=F.PENDING)]))[0].ok
    post = Transfer(11, pending_id=10, amount=AMOUNT_MAX, user_data_128=7, flags=F.POST_PENDING_TRANSFER)
    assert (await ledger.create_transfers([post]))[0].result is TR.created
    retry = Transfer(11, pending_id=10, amount=AMOUNT_MAX, flags=F.POST_PENDING_TRANSFER)
    (result,) = await ledger.create_transfers([retry])
    assert result.result is TR.exists_with_different_user_data_128


async def test_void_releases_the_hold_and_blocks_a_later_post(backend: Backend) -> None:
    b = backend
    debit, credit = await accounts(b, 0, 0)
    pending = xfer(b, debit, credit, 80, flags=F.PENDING)
    wrong = Transfer(id=b.new_id(), pending_id=pending.id, amount=79, flags=F.VOID_PENDING_TRANSFER)
    void = Transfer(id=b.new_id(), pending_id=pending.id, amount=0, flags=F.VOID_PENDING_TRANSFER)
    post = Transfer(id=b.new_id(), pending_id=pending.id, amount=AMOUNT_MAX, flags=F.POST_PENDING_TRANSFER)
    got = await results(b, pending, wrong, void, post)
    assert got == [
        TR.created,
        TR.pending_transfer_has_different_amount,
        TR.created,
        TR.pending_transfer_already_voided,
    ]
    assert await balances(b, debit) == (0, 0, 0, 0)


async def test_post_and_void_check_the_pending_transfer(backend: Backend) -> None:
    b = backend
    debit, credit = await accounts(b, 0, 0)
    single = xfer(b, debit, credit, 5)
    pending = xfer(b, debit, credit, 5, flags=F.PENDING)
    await b.ledger.create_transfers([single, pending])
    post = F.POST_PENDING_TRANSFER
    got = await results(
        b,
        Transfer(id=b.new_id(), pending_id=0, flags=post),
        Transfer(id=b.new_id(), pending_id=b.new_id(), flags=post),
        Transfer(id=b.new_id(), pending_id=single.id, flags=post),
        Transfer(id=b.new_id(), pending_id=pending.id, debit_account_id=credit, flags=post),
        Transfer(id=b.new_id(), pending_id=pending.id, code=99, flags=post, amount=AMOUNT_MAX),
        Transfer(id=b.new_id(), pending_id=pending.id, flags=post | F.BALANCING_DEBIT),
    )
    assert got == [
        TR.pending_id_must_not_be_zero,
        TR.pending_transfer_not_found,
        TR.pending_transfer_not_pending,
        TR.pending_transfer_has_different_debit_account_id,
        TR.pending_transfer_has_different_code,
        TR.flags_are_mutually_exclusive,
    ]


async def test_a_failed_post_reports_timestamp_zero_like_every_other_failure(pool: asyncpg.Pool) -> None:
    # types.AccountEventResult: "timestamp ... 0 for a failure".
    ledger = await postgres_ledger(pool)
    results = await ledger.create_transfers(
        [
            Transfer(10, pending_id=99, amount=AMOUNT_MAX, flags=F.POST_PENDING_TRANSFER),
            Transfer(11, 1, 1, 1, ledger=1, code=1),
        ]
    )
    assert [r.result for r in results] == [TR.pending_transfer_not_found, TR.accounts_must_be_different]
    assert [r.timestamp for r in results] == [0, 0]


async def test_a_pending_transfer_expires_after_its_timeout_and_releases_its_hold(backend: Backend) -> None:
    """A 1 s timeout: TigerBeetle expires on its own clock, waited for; the PostgreSQL ledger when its
    expiry job runs past the timeout on the test clock."""
    b = backend
    debit, credit = await accounts(b, 0, 0)
    short = xfer(b, debit, credit, 30, flags=F.PENDING, timeout=1)
    long = xfer(b, debit, credit, 40, flags=F.PENDING, timeout=3600)
    assert await results(b, short, long) == [TR.created, TR.created]
    if b.clock is not None:
        b.clock.advance(1.001)

    async def released() -> bool:
        await b.ledger.expire_pending()  # the PostgreSQL ledger's periodic job; TigerBeetle: nothing
        return await balances(b, debit) == (40, 0, 0, 0)

    await wait_until(released, timeout_s=60)
    assert await balances(b, credit) == (0, 0, 40, 0)
    post = Transfer(id=b.new_id(), pending_id=short.id, amount=AMOUNT_MAX, flags=F.POST_PENDING_TRANSFER)
    void = Transfer(id=b.new_id(), pending_id=short.id, flags=F.VOID_PENDING_TRANSFER)
    post_long = Transfer(id=b.new_id(), pending_id=long.id, amount=AMOUNT_MAX, flags=F.POST_PENDING_TRANSFER)
    assert await results(b, post, void, post_long) == [
        TR.pending_transfer_expired,
        TR.pending_transfer_expired,
        TR.created,
    ]
    assert await b.ledger.expire_pending() == 0


async def test_a_post_after_the_timeout_fails_as_expired_before_the_expiry_job_ran(
    pool: asyncpg.Pool,
) -> None:
    # The PostgreSQL ledger releases the hold only when `expire_pending` runs (ledger/__init__.py):
    # until then balances show it, but a post or void already fails as TigerBeetle's would.
    clock = FakeClock()
    ledger = await postgres_ledger(pool, clock)
    short = Transfer(10, 1, 2, 30, ledger=1, code=1, flags=F.PENDING, timeout=10)
    long = Transfer(11, 1, 2, 40, ledger=1, code=1, flags=F.PENDING, timeout=100)
    assert all(r.ok for r in await ledger.create_transfers([short, long]))
    clock.advance(10.001)
    post = Transfer(12, pending_id=10, amount=AMOUNT_MAX, flags=F.POST_PENDING_TRANSFER)
    assert [r.result for r in await ledger.create_transfers([post])] == [TR.pending_transfer_expired]
    (debit,) = await ledger.lookup_accounts([1])
    assert debit.debits_pending == 70
    assert await ledger.expire_pending() == 1
    assert await ledger.expire_pending() == 0
    (debit,) = await ledger.lookup_accounts([1])
    assert debit.debits_pending == 40


async def test_balancing_debit_moves_at_most_the_available_balance(backend: Backend) -> None:
    b = backend
    wallet, source, sink = await accounts(b, AccountFlags.DEBITS_MUST_NOT_EXCEED_CREDITS, 0, 0)
    await b.ledger.create_transfers([xfer(b, source, wallet, 70)])
    sweep = xfer(b, wallet, sink, AMOUNT_MAX, flags=F.BALANCING_DEBIT)
    first = await b.ledger.create_transfers([sweep])
    assert first[0].result is TR.created
    (stored,) = await b.ledger.lookup_transfers([sweep.id])
    assert stored.amount == 70
    assert await balances(b, wallet) == (0, 70, 0, 70)
    assert await results(b, sweep) == [TR.exists]


async def test_closed_account_refuses_transfers(backend: Backend) -> None:
    b = backend
    closed, other = await accounts(b, AccountFlags.CLOSED, 0)
    assert await results(b, xfer(b, other, closed, 1), xfer(b, closed, other, 1)) == [
        TR.credit_account_already_closed,
        TR.debit_account_already_closed,
    ]


async def test_account_history_pages_by_timestamp_and_filters_by_code(backend: Backend) -> None:
    b = backend
    account, other = await accounts(b, 0, 0)
    made = [
        xfer(b, account, other, i + 1, code=1 + i % 2)
        if i % 3
        else xfer(b, other, account, i + 1, code=1 + i % 2)
        for i in range(9)
    ]
    await b.ledger.create_transfers(made)
    page1 = await b.ledger.get_account_transfers(account, limit=4)
    page2 = await b.ledger.get_account_transfers(account, limit=4, timestamp_min=page1[-1].timestamp + 1)
    page3 = await b.ledger.get_account_transfers(account, limit=4, timestamp_min=page2[-1].timestamp + 1)
    assert [t.id for t in page1 + page2 + page3] == [t.id for t in made]
    newest = await b.ledger.get_account_transfers(account, limit=2, reversed=True)
    assert [t.id for t in newest] == [made[8].id, made[7].id]
    code_two = await b.ledger.get_account_transfers(account, code=2, limit=100)
    assert [t.id for t in code_two] == [t.id for t in made if t.code == 2]


async def test_balance_is_reported_on_the_accounts_normal_side(backend: Backend) -> None:
    b = backend
    wallet, nostro = await accounts(
        b, AccountFlags.DEBITS_MUST_NOT_EXCEED_CREDITS, AccountFlags.CREDITS_MUST_NOT_EXCEED_DEBITS
    )
    await b.ledger.create_transfers(
        [xfer(b, nostro, wallet, 100), xfer(b, wallet, nostro, 30, flags=F.PENDING)]
    )
    wallet_balance = await b.ledger.balance(wallet)
    nostro_balance = await b.ledger.balance(nostro)
    assert (wallet_balance.posted, wallet_balance.pending, wallet_balance.available) == (100, -30, 70)
    assert (nostro_balance.posted, nostro_balance.pending, nostro_balance.available) == (100, -30, 70)
    assert wallet_balance.normal == "credit"
    assert nostro_balance.normal == "debit"
    with pytest.raises(AccountNotFoundError):
        await b.ledger.balance(b.new_id())


async def test_ensure_accounts_creates_missing_and_refuses_mismatches(backend: Backend) -> None:
    b = backend
    suffix = str(b.new_id())
    wanted = [
        Account(id=account_id_for(f"system.nostro.ipps.THB.{suffix}"), ledger=b.ledger_number, code=1),
        Account(id=account_id_for(f"system.fees.THB.{suffix}"), ledger=b.ledger_number, code=2),
    ]
    first = await ensure_accounts(b.ledger, wanted)
    second = await ensure_accounts(b.ledger, wanted)
    assert [a.id for a in first] == [a.id for a in second] == [a.id for a in wanted]
    changed = [Account(id=wanted[1].id, ledger=b.ledger_number, code=3)]
    with pytest.raises(SystemAccountMismatchError, match="code is 2, expected 3"):
        await ensure_accounts(b.ledger, changed)


async def test_a_batch_larger_than_the_limit_is_refused(backend: Backend) -> None:
    b = backend
    with pytest.raises(BatchTooLargeError):
        await b.ledger.create_transfers([Transfer(id=i + 1) for i in range(BATCH_MAX + 1)])


async def test_a_pending_transfer_can_be_posted_in_its_own_batch_and_a_repeat_post_is_exists(
    backend: Backend,
) -> None:
    b = backend
    debit, credit = await accounts(b, 0, 0)
    pending = xfer(b, debit, credit, 90, flags=F.PENDING | F.LINKED, user_data_128=5)
    post = Transfer(id=b.new_id(), pending_id=pending.id, amount=AMOUNT_MAX, flags=F.POST_PENDING_TRANSFER)
    assert await results(b, pending, post) == [TR.created, TR.created]
    # A retry may name the accounts and the amount the post actually moved: still the same transfer.
    again = Transfer(
        id=post.id, pending_id=pending.id, debit_account_id=debit, amount=90, flags=F.POST_PENDING_TRANSFER
    )
    different = Transfer(id=post.id, pending_id=pending.id, amount=89, flags=F.POST_PENDING_TRANSFER)
    assert await results(b, post, again, different) == [TR.exists, TR.exists, TR.exists_with_different_amount]
    (stored,) = await b.ledger.lookup_transfers([post.id])
    assert stored.user_data_128 == 5


async def test_balancing_credit_stops_at_the_credit_accounts_limit(backend: Backend) -> None:
    b = backend
    nostro, source = await accounts(b, AccountFlags.CREDITS_MUST_NOT_EXCEED_DEBITS, 0)
    await b.ledger.create_transfers([xfer(b, nostro, source, 25)])
    refill = xfer(b, source, nostro, 100, flags=F.BALANCING_CREDIT)
    assert await results(b, refill) == [TR.created]
    (stored,) = await b.ledger.lookup_transfers([refill.id])
    assert stored.amount == 25
    assert await balances(b, nostro) == (0, 25, 0, 25)


async def test_a_batch_larger_than_one_request_is_applied_whole_in_order(backend: Backend) -> None:
    """1,000 transfers in chains of 4 (a test replica takes 253 events per request: the adapter splits
    the batch at chain ends); the results are one per event, in order, chains whole."""
    b = backend
    debit, credit = await accounts(b, 0, 0)
    batch = []
    for i in range(1_000):
        linked = F.LINKED if i % 4 != 3 else 0
        # Every 40th chain ends with a repeated id (exists_with_different_flags): undone whole.
        broken = i % 160 == 159
        batch.append(xfer(b, debit, credit, 1, flags=linked, id=batch[0].id if broken else b.new_id()))
    got = await results(b, *batch)
    expected = []
    for i in range(1_000):
        chain_broken = (i // 4) % 40 == 39
        if not chain_broken:
            expected.append(TR.created)
        elif i % 4 == 3:
            expected.append(TR.exists_with_different_flags)
        else:
            expected.append(TR.linked_event_failed)
    assert got == expected
    assert await balances(b, debit) == (0, 1_000 - 6 * 4, 0, 0)


async def test_tigerbeetle_refuses_a_linked_chain_longer_than_one_request(tigerbeetle: Backend) -> None:
    # A PostgreSQL batch has no request size.
    b = tigerbeetle
    debit, credit = await accounts(b, 0, 0)
    chain = [xfer(b, debit, credit, 1, flags=F.LINKED) for _ in range(299)] + [xfer(b, debit, credit, 1)]
    with pytest.raises(LedgerError, match="linked chain"):
        await b.ledger.create_transfers(chain)
    assert await balances(b, debit) == (0, 0, 0, 0)


async def test_tigerbeetle_lets_a_batchs_first_event_decide_whether_the_batch_is_imported(
    tigerbeetle: Backend,
) -> None:
    """A difference (ledger/__init__.py): the PostgreSQL ledger answers `reserved_flag` to imported
    events; TigerBeetle imports a batch whose first event is imported, and refuses an event of the
    other kind in it."""
    b = tigerbeetle
    (anchor,) = await b.ledger.create_accounts([Account(id=b.new_id(), ledger=b.ledger_number, code=1)])
    # An imported event carries its own timestamp, past the last one of its kind and not ahead of
    # the cluster's clock.
    imported = Account(
        id=b.new_id(),
        ledger=b.ledger_number,
        code=1,
        flags=AccountFlags.IMPORTED,
        timestamp=anchor.timestamp + 1,
    )
    plain = Account(id=b.new_id(), ledger=b.ledger_number, code=1)
    got = await b.ledger.create_accounts([imported, plain])
    assert [r.result for r in got] == [AR.created, AR.imported_event_expected]
    later = replace(imported, id=b.new_id(), timestamp=anchor.timestamp + 2)
    got = await b.ledger.create_accounts([plain, later])
    assert [r.result for r in got] == [AR.created, AR.imported_event_not_expected]
    (stored,) = await b.ledger.lookup_accounts([imported.id])
    assert stored.timestamp == anchor.timestamp + 1


async def test_the_postgres_ledger_refuses_imported_events(pool: asyncpg.Pool) -> None:
    # An imported event brings its timestamp, which this ledger refuses first; the flag alone is
    # reserved here.
    ledger = await postgres_ledger(pool)
    accounts = [
        Account(9, ledger=1, code=1, flags=AccountFlags.IMPORTED, timestamp=5),
        Account(10, ledger=1, code=1, flags=AccountFlags.IMPORTED),
    ]
    transfers = [
        Transfer(20, 1, 2, 1, ledger=1, code=1, flags=F.IMPORTED, timestamp=5),
        Transfer(21, 1, 2, 1, ledger=1, code=1, flags=F.IMPORTED),
    ]
    assert [r.result for r in await ledger.create_accounts(accounts)] == [
        AR.timestamp_must_be_zero,
        AR.reserved_flag,
    ]
    assert [r.result for r in await ledger.create_transfers(transfers)] == [
        TR.timestamp_must_be_zero,
        TR.reserved_flag,
    ]
