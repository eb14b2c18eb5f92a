"""Accounts, transfers, flags and result codes, with TigerBeetle's fields, bit values and names.

The result enums list their members in TigerBeetle's order of descending precedence (the order of
`CreateAccountStatus`/`CreateTransferStatus` in the 0.17 client's `bindings.py`): when several
results apply to an event, the first one listed is returned. Their values are TigerBeetle's wire
codes, so the TigerBeetle adapter maps a status by value.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Literal

U128_MAX = (1 << 128) - 1
U64_MAX = (1 << 64) - 1
U32_MAX = (1 << 32) - 1
U16_MAX = (1 << 16) - 1

AMOUNT_MAX = U128_MAX
"""A post with this amount posts the full pending amount (TigerBeetle >= 0.16); balancing transfers
use it as "no upper bound"."""

BATCH_MAX = 8189
"""Events per request, as TigerBeetle's default configuration."""

NANOSECONDS_PER_SECOND = 1_000_000_000


class AccountFlags(enum.IntFlag):
    NONE = 0
    LINKED = 1 << 0
    DEBITS_MUST_NOT_EXCEED_CREDITS = 1 << 1
    CREDITS_MUST_NOT_EXCEED_DEBITS = 1 << 2
    HISTORY = 1 << 3
    IMPORTED = 1 << 4
    CLOSED = 1 << 5


class TransferFlags(enum.IntFlag):
    NONE = 0
    LINKED = 1 << 0
    PENDING = 1 << 1
    POST_PENDING_TRANSFER = 1 << 2
    VOID_PENDING_TRANSFER = 1 << 3
    BALANCING_DEBIT = 1 << 4
    BALANCING_CREDIT = 1 << 5
    CLOSING_DEBIT = 1 << 6
    CLOSING_CREDIT = 1 << 7
    IMPORTED = 1 << 8


@dataclass(frozen=True, slots=True)
class Account:
    """A TigerBeetle account. Balances are set by the ledger and must be zero when creating one."""

    id: int
    debits_pending: int = 0
    debits_posted: int = 0
    credits_pending: int = 0
    credits_posted: int = 0
    user_data_128: int = 0
    user_data_64: int = 0
    user_data_32: int = 0
    ledger: int = 0
    code: int = 0
    flags: int = 0
    timestamp: int = 0


@dataclass(frozen=True, slots=True)
class Transfer:
    """A TigerBeetle transfer; `timeout` is in seconds, `timestamp` in nanoseconds (set by the ledger)."""

    id: int
    debit_account_id: int = 0
    credit_account_id: int = 0
    amount: int = 0
    pending_id: int = 0
    user_data_128: int = 0
    user_data_64: int = 0
    user_data_32: int = 0
    timeout: int = 0
    ledger: int = 0
    code: int = 0
    flags: int = 0
    timestamp: int = 0


class CreateAccountResult(enum.IntEnum):
    """Results of `create_accounts`, in TigerBeetle's order of descending precedence."""

    created = 0xFFFFFFFF
    linked_event_failed = 1
    linked_event_chain_open = 2
    imported_event_expected = 22
    imported_event_not_expected = 23
    timestamp_must_be_zero = 3
    imported_event_timestamp_out_of_range = 24
    imported_event_timestamp_must_not_advance = 25
    reserved_field = 4
    reserved_flag = 5
    id_must_not_be_zero = 6
    id_must_not_be_int_max = 7
    exists_with_different_flags = 15
    exists_with_different_user_data_128 = 16
    exists_with_different_user_data_64 = 17
    exists_with_different_user_data_32 = 18
    exists_with_different_ledger = 19
    exists_with_different_code = 20
    exists = 21
    flags_are_mutually_exclusive = 8
    debits_pending_must_be_zero = 9
    debits_posted_must_be_zero = 10
    credits_pending_must_be_zero = 11
    credits_posted_must_be_zero = 12
    ledger_must_not_be_zero = 13
    code_must_not_be_zero = 14
    imported_event_timestamp_must_not_regress = 26


class CreateTransferResult(enum.IntEnum):
    """Results of `create_transfers`, in TigerBeetle's order of descending precedence."""

    created = 0xFFFFFFFF
    linked_event_failed = 1
    linked_event_chain_open = 2
    imported_event_expected = 56
    imported_event_not_expected = 57
    timestamp_must_be_zero = 3
    imported_event_timestamp_out_of_range = 58
    imported_event_timestamp_must_not_advance = 59
    reserved_flag = 4
    id_must_not_be_zero = 5
    id_must_not_be_int_max = 6
    exists_with_different_flags = 36
    exists_with_different_pending_id = 40
    exists_with_different_timeout = 44
    exists_with_different_debit_account_id = 37
    exists_with_different_credit_account_id = 38
    exists_with_different_amount = 39
    exists_with_different_user_data_128 = 41
    exists_with_different_user_data_64 = 42
    exists_with_different_user_data_32 = 43
    exists_with_different_ledger = 67
    exists_with_different_code = 45
    exists = 46
    id_already_failed = 68
    flags_are_mutually_exclusive = 7
    debit_account_id_must_not_be_zero = 8
    debit_account_id_must_not_be_int_max = 9
    credit_account_id_must_not_be_zero = 10
    credit_account_id_must_not_be_int_max = 11
    accounts_must_be_different = 12
    pending_id_must_be_zero = 13
    pending_id_must_not_be_zero = 14
    pending_id_must_not_be_int_max = 15
    pending_id_must_be_different = 16
    timeout_reserved_for_pending_transfer = 17
    closing_transfer_must_be_pending = 64
    ledger_must_not_be_zero = 19
    code_must_not_be_zero = 20
    debit_account_not_found = 21
    credit_account_not_found = 22
    accounts_must_have_the_same_ledger = 23
    transfer_must_have_the_same_ledger_as_accounts = 24
    pending_transfer_not_found = 25
    pending_transfer_not_pending = 26
    pending_transfer_has_different_debit_account_id = 27
    pending_transfer_has_different_credit_account_id = 28
    pending_transfer_has_different_ledger = 29
    pending_transfer_has_different_code = 30
    exceeds_pending_transfer_amount = 31
    pending_transfer_has_different_amount = 32
    pending_transfer_already_posted = 33
    pending_transfer_already_voided = 34
    pending_transfer_expired = 35
    imported_event_timestamp_must_not_regress = 60
    imported_event_timestamp_must_postdate_debit_account = 61
    imported_event_timestamp_must_postdate_credit_account = 62
    imported_event_timeout_must_be_zero = 63
    debit_account_already_closed = 65
    credit_account_already_closed = 66
    overflows_debits_pending = 47
    overflows_credits_pending = 48
    overflows_debits_posted = 49
    overflows_credits_posted = 50
    overflows_debits = 51
    overflows_credits = 52
    overflows_timeout = 53
    exceeds_credits = 54
    exceeds_debits = 55


# TigerBeetle 0.17 names for the same enums.
CreateAccountStatus = CreateAccountResult
CreateTransferStatus = CreateTransferResult

TRANSIENT_TRANSFER_RESULTS = frozenset(
    {
        CreateTransferResult.debit_account_not_found,
        CreateTransferResult.credit_account_not_found,
        CreateTransferResult.pending_transfer_not_found,
        CreateTransferResult.exceeds_credits,
        CreateTransferResult.exceeds_debits,
        CreateTransferResult.debit_account_already_closed,
        CreateTransferResult.credit_account_already_closed,
    }
)
"""Results that depend on the state of the ledger at the time: they burn the id, so a retry of the
same id returns `id_already_failed` rather than a different outcome (TigerBeetle >= 0.16.4)."""


@dataclass(frozen=True, slots=True)
class AccountEventResult:
    """One result per event, as TigerBeetle 0.17 returns them (dense, successes included).

    `timestamp` is the account's timestamp when created, the existing account's for `exists`,
    and 0 for a failure.
    """

    timestamp: int
    result: CreateAccountResult

    @property
    def ok(self) -> bool:
        """Created now or already existing identically: what most callers treat as success."""
        return self.result in (CreateAccountResult.created, CreateAccountResult.exists)


@dataclass(frozen=True, slots=True)
class TransferEventResult:
    """One result per transfer event; see `AccountEventResult` for `timestamp`."""

    timestamp: int
    result: CreateTransferResult

    @property
    def ok(self) -> bool:
        return self.result in (CreateTransferResult.created, CreateTransferResult.exists)


Normal = Literal["debit", "credit"]


@dataclass(frozen=True, slots=True)
class Balance:
    """An account's balance on its normal side (see `balance_of`); amounts are signed."""

    posted: int
    pending: int
    available: int
    normal: Normal


def balance_of(account: Account, normal: Normal | None = None) -> Balance:
    """Posted, pending and available balance of `account` on its normal side.

    A credit-normal account (a liability such as a customer wallet; the default, and what
    `debits_must_not_exceed_credits` implies) has posted = credits_posted - debits_posted,
    pending = credits_pending - debits_pending, and available = credits_posted - debits_posted -
    debits_pending: what it may still be debited, pending credits not counted (exactly the limit
    TigerBeetle enforces with that flag). A debit-normal account (an asset such as a nostro account;
    implied by `credits_must_not_exceed_debits`) mirrors it: available = debits_posted -
    credits_posted - credits_pending.
    """
    if normal is None:
        debit_normal = bool(account.flags & AccountFlags.CREDITS_MUST_NOT_EXCEED_DEBITS)
        normal = "debit" if debit_normal else "credit"
    if normal == "credit":
        return Balance(
            posted=account.credits_posted - account.debits_posted,
            pending=account.credits_pending - account.debits_pending,
            available=account.credits_posted - account.debits_posted - account.debits_pending,
            normal=normal,
        )
    return Balance(
        posted=account.debits_posted - account.credits_posted,
        pending=account.debits_pending - account.credits_pending,
        available=account.debits_posted - account.credits_posted - account.credits_pending,
        normal=normal,
    )


class LedgerError(Exception):
    """Base of the ledger's typed errors (expected failures of events are results, not errors)."""


class BatchTooLargeError(LedgerError):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"a batch holds at most {limit} events, got {size}")


class AccountNotFoundError(LedgerError):
    def __init__(self, account_id: int) -> None:
        self.account_id = account_id
        super().__init__(f"no ledger account with id {account_id}")


class LedgerUnavailableError(LedgerError):
    """The ledger could not be reached (after the configured attempts)."""


def validate_account(account: Account) -> None:
    """Reject values outside the field widths: a programmer error, as TigerBeetle's client raises."""
    _check_width("id", account.id, U128_MAX)
    _check_width("user_data_128", account.user_data_128, U128_MAX)
    _check_width("user_data_64", account.user_data_64, U64_MAX)
    _check_width("user_data_32", account.user_data_32, U32_MAX)
    _check_width("ledger", account.ledger, U32_MAX)
    _check_width("code", account.code, U16_MAX)
    _check_width("flags", account.flags, U16_MAX)
    _check_width("timestamp", account.timestamp, U64_MAX)
    for name in ("debits_pending", "debits_posted", "credits_pending", "credits_posted"):
        _check_width(name, getattr(account, name), U128_MAX)


def validate_transfer(transfer: Transfer) -> None:
    t = transfer
    # One chained comparison for the common case; field by field only to name the culprit.
    if (
        0 <= t.id <= U128_MAX
        and 0 <= t.debit_account_id <= U128_MAX
        and 0 <= t.credit_account_id <= U128_MAX
        and 0 <= t.amount <= U128_MAX
        and 0 <= t.pending_id <= U128_MAX
        and 0 <= t.user_data_128 <= U128_MAX
        and 0 <= t.user_data_64 <= U64_MAX
        and 0 <= t.user_data_32 <= U32_MAX
        and 0 <= t.timeout <= U32_MAX
        and 0 <= t.ledger <= U32_MAX
        and 0 <= t.code <= U16_MAX
        and 0 <= t.flags <= U16_MAX
        and 0 <= t.timestamp <= U64_MAX
    ):
        return
    for name in ("id", "debit_account_id", "credit_account_id", "amount", "pending_id", "user_data_128"):
        _check_width(name, getattr(transfer, name), U128_MAX)
    _check_width("user_data_64", transfer.user_data_64, U64_MAX)
    _check_width("user_data_32", transfer.user_data_32, U32_MAX)
    _check_width("timeout", transfer.timeout, U32_MAX)
    _check_width("ledger", transfer.ledger, U32_MAX)
    _check_width("code", transfer.code, U16_MAX)
    _check_width("flags", transfer.flags, U16_MAX)
    _check_width("timestamp", transfer.timestamp, U64_MAX)


def _check_width(name: str, value: int, maximum: int) -> None:
    if not 0 <= value <= maximum:
        raise ValueError(f"{name}={value} is outside 0..{maximum}")
