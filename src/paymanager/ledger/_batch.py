"""Applies one batch of events to state held in memory: TigerBeetle's rules, without I/O.

The PostgreSQL ledger loads (and locks) what a batch touches, runs it through `BatchState`, and
writes back the changes in a few set-based statements. Keeping the rules here, pure, is what lets a
batch of 1,000 transfers cost a handful of round trips instead of thousands.

Linked chains are applied tentatively: every change is journalled while a chain is open and undone
if one of its events fails, so a chain succeeds or fails whole.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from dataclasses import dataclass, field
from typing import Any

from paymanager.ledger.types import (
    AMOUNT_MAX,
    NANOSECONDS_PER_SECOND,
    TRANSIENT_TRANSFER_RESULTS,
    U64_MAX,
    U128_MAX,
    Account,
    AccountEventResult,
    AccountFlags,
    CreateAccountResult,
    CreateTransferResult,
    Transfer,
    TransferEventResult,
    TransferFlags,
)

AR = CreateAccountResult
TR = CreateTransferResult

BALANCE_MAX = (1 << 63) - 1
"""Balances and amounts are bigint columns: `overflows_*` fire at this bound (not at 2^128 - 1)."""

# Flags this ledger supports; the others (closing_*, imported) are answered with `reserved_flag`.
# Plain ints, not IntFlag: this arithmetic runs per event, and on enum members it goes through Python.
_ACCOUNT_FLAGS_SUPPORTED = int(
    AccountFlags.LINKED
    | AccountFlags.DEBITS_MUST_NOT_EXCEED_CREDITS
    | AccountFlags.CREDITS_MUST_NOT_EXCEED_DEBITS
    | AccountFlags.HISTORY
    | AccountFlags.CLOSED
)
_TRANSFER_FLAGS_SUPPORTED = int(
    TransferFlags.LINKED
    | TransferFlags.PENDING
    | TransferFlags.POST_PENDING_TRANSFER
    | TransferFlags.VOID_PENDING_TRANSFER
    | TransferFlags.BALANCING_DEBIT
    | TransferFlags.BALANCING_CREDIT
)
_LINKED = 1
_PENDING = int(TransferFlags.PENDING)
_POST = int(TransferFlags.POST_PENDING_TRANSFER)
_VOID = int(TransferFlags.VOID_PENDING_TRANSFER)
_POST_OR_VOID = _POST | _VOID
_BALANCING_DEBIT = int(TransferFlags.BALANCING_DEBIT)
_BALANCING_CREDIT = int(TransferFlags.BALANCING_CREDIT)
_BALANCING = _BALANCING_DEBIT | _BALANCING_CREDIT
_DMNEC = int(AccountFlags.DEBITS_MUST_NOT_EXCEED_CREDITS)
_CMNED = int(AccountFlags.CREDITS_MUST_NOT_EXCEED_DEBITS)
_CLOSED = int(AccountFlags.CLOSED)

PENDING = "pending"
POSTED = "posted"
VOIDED = "voided"
EXPIRED = "expired"

Balances = tuple[int, int, int, int]
"""debits_pending, debits_posted, credits_pending, credits_posted"""

AccountRules = tuple[int, int]
"""ledger, flags: all that the rules of a transfer read of an account besides its balances"""

_MISSING: Any = object()

# A dict lookup instead of `CreateTransferResult(code)`: the enum's constructor is slow for a per-event call.
_TRANSFER_RESULTS_BY_CODE = {int(r): r for r in CreateTransferResult}


@dataclass(slots=True)
class PendingState:
    state: str
    expires_at: int  # nanoseconds; 0 when the pending transfer has no timeout


@dataclass
class BatchState:
    """What a batch can see and change. Callers fill the maps with everything the batch touches."""

    accounts: dict[int, Account] = field(default_factory=dict)
    balances: dict[int, Balances] = field(default_factory=dict)
    # Every account a batch of transfers can see, by id. `accounts` holds the whole Account only
    # where a batch of accounts needs it (to compare a repeated id); a batch of transfers loads just
    # these two numbers and the balances: a frozen Account per locked row would be built for every
    # account of every batch, most of them only to read these two fields.
    account_rules: dict[int, AccountRules] = field(default_factory=dict)
    transfers: dict[int, Transfer] = field(default_factory=dict)
    pending: dict[int, PendingState] = field(default_factory=dict)
    failed: dict[int, CreateTransferResult] = field(default_factory=dict)
    balance_max: int = BALANCE_MAX
    # What changed, for the writer: created objects in order, touched keys.
    created_accounts: list[Account] = field(default_factory=list)
    created_transfers: list[Transfer] = field(default_factory=list)
    changed_balances: set[int] = field(default_factory=set)
    changed_pending: set[int] = field(default_factory=set)
    new_failed: set[int] = field(default_factory=set)
    _journal: list[tuple[Any, Any, Any]] | None = None

    @classmethod
    def from_accounts(cls, accounts: Sequence[Account], **kwargs: Any) -> BatchState:
        state = cls(**kwargs)
        for account in accounts:
            state.add_account(account)
        return state

    def add_account(self, account: Account) -> None:
        self.accounts[account.id] = account
        self.account_rules[account.id] = (account.ledger, account.flags)
        self.balances[account.id] = (
            account.debits_pending,
            account.debits_posted,
            account.credits_pending,
            account.credits_posted,
        )

    def add_account_rules(self, account_id: int, ledger: int, flags: int, balances: Balances) -> None:
        """What a batch of transfers needs of an account: enough for transfers, not for accounts."""
        self.account_rules[account_id] = (ledger, flags)
        self.balances[account_id] = balances

    def account_with_balances(self, account_id: int) -> Account:
        a = self.accounts[account_id]
        dp, dpo, cp, cpo = self.balances[account_id]
        return Account(
            a.id, dp, dpo, cp, cpo, a.user_data_128, a.user_data_64, a.user_data_32, a.ledger, a.code,
            a.flags, a.timestamp,
        )  # fmt: skip

    # --- the journal of an open linked chain ---------------------------------------------------

    def _put(self, target: dict[Any, Any], key: Any, value: Any) -> None:
        if self._journal is not None:
            self._journal.append((target, key, target.get(key, _MISSING)))
        target[key] = value

    def _mark(self, target: set[int], key: int) -> None:
        if self._journal is not None:
            self._journal.append((target, key, key in target))
        target.add(key)

    def _append(self, target: list[Any], value: Any) -> None:
        if self._journal is not None:
            self._journal.append((target, None, None))
        target.append(value)

    def _rollback(self) -> None:
        assert self._journal is not None
        for target, key, old in reversed(self._journal):
            if isinstance(target, dict):
                if old is _MISSING:
                    del target[key]
                else:
                    target[key] = old
            elif isinstance(target, set):
                if not old:
                    target.discard(key)
            else:
                target.pop()
        self._journal = []

    # --- accounts ------------------------------------------------------------------------------

    def create_accounts(self, events: Sequence[Account], timestamp: int) -> list[AccountEventResult]:
        def apply_one(index: int, event: Any) -> tuple[int, int]:
            result, ts = self._create_account(event, timestamp + index)
            return int(result), ts

        codes = _apply_chains(
            self, events, apply_one, int(AR.linked_event_failed), int(AR.linked_event_chain_open)
        )
        return [AccountEventResult(ts, AR(code)) for code, ts in codes]

    def _create_account(self, a: Account, timestamp: int) -> tuple[CreateAccountResult, int]:
        if a.timestamp != 0:
            return AR.timestamp_must_be_zero, 0
        if a.flags & ~_ACCOUNT_FLAGS_SUPPORTED:
            return AR.reserved_flag, 0
        if a.id == 0:
            return AR.id_must_not_be_zero, 0
        if a.id == U128_MAX:
            return AR.id_must_not_be_int_max, 0
        existing = self.accounts.get(a.id)
        if existing is not None:
            return _account_exists(a, existing), existing.timestamp
        if a.flags & _DMNEC and a.flags & _CMNED:
            return AR.flags_are_mutually_exclusive, 0
        if a.debits_pending:
            return AR.debits_pending_must_be_zero, 0
        if a.debits_posted:
            return AR.debits_posted_must_be_zero, 0
        if a.credits_pending:
            return AR.credits_pending_must_be_zero, 0
        if a.credits_posted:
            return AR.credits_posted_must_be_zero, 0
        if a.ledger == 0:
            return AR.ledger_must_not_be_zero, 0
        if a.code == 0:
            return AR.code_must_not_be_zero, 0
        created = Account(
            a.id, 0, 0, 0, 0, a.user_data_128, a.user_data_64, a.user_data_32, a.ledger, a.code, a.flags,
            timestamp,
        )  # fmt: skip
        self._put(self.accounts, a.id, created)
        self._put(self.account_rules, a.id, (a.ledger, a.flags))
        self._put(self.balances, a.id, (0, 0, 0, 0))
        self._append(self.created_accounts, created)
        return AR.created, timestamp

    # --- transfers -----------------------------------------------------------------------------

    def create_transfers(
        self, events: Sequence[Transfer], timestamp: int, ends: Container[int] | None = None
    ) -> list[TransferEventResult]:
        def apply_one(index: int, event: Any) -> tuple[int, int]:
            result, ts = self._create_transfer(event, timestamp + index)
            if result in TRANSIENT_TRANSFER_RESULTS:
                # A transient failure burns its id at once and outside the chain's journal: retrying
                # the same id, later in this batch or in another, must not produce a different outcome.
                self.failed[event.id] = result
                self.new_failed.add(event.id)
            return int(result), ts

        codes = _apply_chains(
            self, events, apply_one, int(TR.linked_event_failed), int(TR.linked_event_chain_open), ends
        )
        by_code = _TRANSFER_RESULTS_BY_CODE
        return [TransferEventResult(ts, by_code[code]) for code, ts in codes]

    def _create_transfer(self, t: Transfer, timestamp: int) -> tuple[CreateTransferResult, int]:
        if t.timestamp != 0:
            return TR.timestamp_must_be_zero, 0
        if t.flags & ~_TRANSFER_FLAGS_SUPPORTED:
            return TR.reserved_flag, 0
        if t.id == 0:
            return TR.id_must_not_be_zero, 0
        if t.id == U128_MAX:
            return TR.id_must_not_be_int_max, 0
        existing = self.transfers.get(t.id)
        if existing is not None:
            pending = self.transfers.get(t.pending_id) if t.flags & _POST_OR_VOID else None
            return _transfer_exists(t, existing, pending), existing.timestamp
        if t.id in self.failed:
            return TR.id_already_failed, 0
        flags = t.flags
        if (flags & _PENDING and flags & _POST_OR_VOID) or (flags & _POST and flags & _VOID):
            return TR.flags_are_mutually_exclusive, 0
        if flags & _POST_OR_VOID:
            if flags & _BALANCING:
                return TR.flags_are_mutually_exclusive, 0
            outcome = self._post_or_void(t, timestamp)
            # A failure's timestamp is 0, as for every other failure (types.py).
            return outcome, (timestamp if outcome is TR.created else 0)
        result = self._check_single_phase(t)
        if result is not None:
            return result, 0
        return self._apply_single_phase(t, timestamp)

    def _check_single_phase(self, t: Transfer) -> CreateTransferResult | None:
        if t.debit_account_id == 0:
            return TR.debit_account_id_must_not_be_zero
        if t.debit_account_id == U128_MAX:
            return TR.debit_account_id_must_not_be_int_max
        if t.credit_account_id == 0:
            return TR.credit_account_id_must_not_be_zero
        if t.credit_account_id == U128_MAX:
            return TR.credit_account_id_must_not_be_int_max
        if t.debit_account_id == t.credit_account_id:
            return TR.accounts_must_be_different
        if t.pending_id != 0:
            return TR.pending_id_must_be_zero
        if not t.flags & _PENDING and t.timeout != 0:
            return TR.timeout_reserved_for_pending_transfer
        if t.ledger == 0:
            return TR.ledger_must_not_be_zero
        if t.code == 0:
            return TR.code_must_not_be_zero
        debit = self.account_rules.get(t.debit_account_id)
        if debit is None:
            return TR.debit_account_not_found
        credit = self.account_rules.get(t.credit_account_id)
        if credit is None:
            return TR.credit_account_not_found
        if debit[0] != credit[0]:
            return TR.accounts_must_have_the_same_ledger
        if t.ledger != debit[0]:
            return TR.transfer_must_have_the_same_ledger_as_accounts
        if debit[1] & _CLOSED:
            return TR.debit_account_already_closed
        if credit[1] & _CLOSED:
            return TR.credit_account_already_closed
        return None

    def _apply_single_phase(self, t: Transfer, timestamp: int) -> tuple[CreateTransferResult, int]:
        limit = self.balance_max
        dr_dp, dr_dpo, dr_cp, dr_cpo = self.balances[t.debit_account_id]
        cr_dp, cr_dpo, cr_cp, cr_cpo = self.balances[t.credit_account_id]
        amount = t.amount
        if t.flags & _BALANCING_DEBIT:
            amount = min(amount, max(0, dr_cpo - dr_dpo - dr_dp))
        if t.flags & _BALANCING_CREDIT:
            amount = min(amount, max(0, cr_dpo - cr_cpo - cr_cp))
        pending = t.flags & _PENDING
        if pending:
            if dr_dp + amount > limit:
                return TR.overflows_debits_pending, 0
            if cr_cp + amount > limit:
                return TR.overflows_credits_pending, 0
        if dr_dpo + amount > limit:
            return TR.overflows_debits_posted, 0
        if cr_cpo + amount > limit:
            return TR.overflows_credits_posted, 0
        if dr_dp + dr_dpo + amount > limit:
            return TR.overflows_debits, 0
        if cr_cp + cr_cpo + amount > limit:
            return TR.overflows_credits, 0
        expires_at = timestamp + t.timeout * NANOSECONDS_PER_SECOND if pending and t.timeout else 0
        if expires_at > U64_MAX:
            return TR.overflows_timeout, 0
        if self.account_rules[t.debit_account_id][1] & _DMNEC and dr_dp + dr_dpo + amount > dr_cpo:
            return TR.exceeds_credits, 0
        if self.account_rules[t.credit_account_id][1] & _CMNED and cr_cp + cr_cpo + amount > cr_dpo:
            return TR.exceeds_debits, 0
        if pending:
            self._set_balances(t.debit_account_id, (dr_dp + amount, dr_dpo, dr_cp, dr_cpo))
            self._set_balances(t.credit_account_id, (cr_dp, cr_dpo, cr_cp + amount, cr_cpo))
            self._set_pending(t.id, PendingState(PENDING, expires_at))
        else:
            self._set_balances(t.debit_account_id, (dr_dp, dr_dpo + amount, dr_cp, dr_cpo))
            self._set_balances(t.credit_account_id, (cr_dp, cr_dpo, cr_cp, cr_cpo + amount))
        stored = Transfer(
            t.id, t.debit_account_id, t.credit_account_id, amount, 0, t.user_data_128, t.user_data_64,
            t.user_data_32, t.timeout, t.ledger, t.code, t.flags, timestamp,
        )  # fmt: skip
        self._store(stored)
        return TR.created, timestamp

    def _post_or_void(self, t: Transfer, timestamp: int) -> CreateTransferResult:
        if t.pending_id == 0:
            return TR.pending_id_must_not_be_zero
        if t.pending_id == U128_MAX:
            return TR.pending_id_must_not_be_int_max
        if t.pending_id == t.id:
            return TR.pending_id_must_be_different
        if t.timeout != 0:
            return TR.timeout_reserved_for_pending_transfer
        p = self.transfers.get(t.pending_id)
        if p is None:
            return TR.pending_transfer_not_found
        if not p.flags & _PENDING:
            return TR.pending_transfer_not_pending
        if t.debit_account_id and t.debit_account_id != p.debit_account_id:
            return TR.pending_transfer_has_different_debit_account_id
        if t.credit_account_id and t.credit_account_id != p.credit_account_id:
            return TR.pending_transfer_has_different_credit_account_id
        if t.ledger and t.ledger != p.ledger:
            return TR.pending_transfer_has_different_ledger
        if t.code and t.code != p.code:
            return TR.pending_transfer_has_different_code
        void = t.flags & _VOID
        if void:
            amount = p.amount if t.amount == 0 else t.amount
        else:
            amount = p.amount if t.amount == AMOUNT_MAX else t.amount
        if amount > p.amount:
            return TR.exceeds_pending_transfer_amount
        if void and amount < p.amount:
            return TR.pending_transfer_has_different_amount
        state = self.pending[p.id]
        if state.state == POSTED:
            return TR.pending_transfer_already_posted
        if state.state == VOIDED:
            return TR.pending_transfer_already_voided
        if state.state == EXPIRED or (state.expires_at and state.expires_at <= timestamp):
            return TR.pending_transfer_expired
        if self.account_rules[p.debit_account_id][1] & _CLOSED:
            return TR.debit_account_already_closed
        if self.account_rules[p.credit_account_id][1] & _CLOSED:
            return TR.credit_account_already_closed
        dr_dp, dr_dpo, dr_cp, dr_cpo = self.balances[p.debit_account_id]
        cr_dp, cr_dpo, cr_cp, cr_cpo = self.balances[p.credit_account_id]
        posted = 0 if void else amount
        if dr_dpo + posted > self.balance_max:
            return TR.overflows_debits_posted
        if cr_cpo + posted > self.balance_max:
            return TR.overflows_credits_posted
        self._set_balances(p.debit_account_id, (dr_dp - p.amount, dr_dpo + posted, dr_cp, dr_cpo))
        self._set_balances(p.credit_account_id, (cr_dp, cr_dpo, cr_cp - p.amount, cr_cpo + posted))
        self._set_pending(p.id, PendingState(VOIDED if void else POSTED, state.expires_at))
        stored = Transfer(
            t.id, p.debit_account_id, p.credit_account_id, amount, p.id,
            t.user_data_128 or p.user_data_128, t.user_data_64 or p.user_data_64,
            t.user_data_32 or p.user_data_32, 0, p.ledger, p.code, t.flags, timestamp,
        )  # fmt: skip
        self._store(stored)
        return TR.created

    def expire(self, pending_id: int) -> None:
        """Release the hold of a pending transfer whose timeout passed (the caller checked it)."""
        p = self.transfers[pending_id]
        assert self.pending[pending_id].state == PENDING, pending_id
        dr_dp, dr_dpo, dr_cp, dr_cpo = self.balances[p.debit_account_id]
        cr_dp, cr_dpo, cr_cp, cr_cpo = self.balances[p.credit_account_id]
        self._set_balances(p.debit_account_id, (dr_dp - p.amount, dr_dpo, dr_cp, dr_cpo))
        self._set_balances(p.credit_account_id, (cr_dp, cr_dpo, cr_cp - p.amount, cr_cpo))
        self._set_pending(pending_id, PendingState(EXPIRED, self.pending[pending_id].expires_at))

    # `_set_balances` and `_store` run for every transfer: outside a linked chain (no journal) they
    # skip the journalling helpers, two method calls fewer each. `_set_pending` runs only for
    # pending, post and void transfers and keeps the plain path.
    def _set_balances(self, account_id: int, balances: Balances) -> None:
        if self._journal is None:
            self.balances[account_id] = balances
            self.changed_balances.add(account_id)
            return
        self._put(self.balances, account_id, balances)
        self._mark(self.changed_balances, account_id)

    def _set_pending(self, pending_id: int, state: PendingState) -> None:
        self._put(self.pending, pending_id, state)
        self._mark(self.changed_pending, pending_id)

    def _store(self, transfer: Transfer) -> None:
        if self._journal is None:
            self.transfers[transfer.id] = transfer
            self.created_transfers.append(transfer)
            return
        self._put(self.transfers, transfer.id, transfer)
        self._append(self.created_transfers, transfer)


def _apply_chains(
    state: BatchState,
    events: Sequence[Any],
    apply_one: Any,
    linked_failed: int,
    chain_open: int,
    ends: Container[int] | None = None,
) -> list[tuple[int, int]]:
    """Apply events in order; a linked chain is journalled and undone whole if one event fails.

    The first failing event of a chain keeps its own result; the chain's other events answer
    `linked_event_failed`. A request that ends inside a chain answers `linked_event_chain_open` for
    its last event (TigerBeetle's rule). `ends` holds the index of the last event of each request
    when several requests share the batch (default: the batch is one request); no chain crosses one.
    """
    created = 0xFFFFFFFF
    results: list[tuple[int, int]] = [(0, 0)] * len(events)
    if ends is None:
        ends = (len(events) - 1,)
    chain_start = -1
    chain_broken = False
    for index, event in enumerate(events):
        linked = event.flags & _LINKED
        if chain_start < 0 and linked:
            chain_start = index
            state._journal = []
        if linked and index in ends:
            # TigerBeetle answers chain_open for a linked last event even when the chain already broke.
            results[index] = (chain_open, 0)
            if not chain_broken:
                chain_broken = True
                state._rollback()
                for earlier in range(chain_start, index):
                    results[earlier] = (linked_failed, 0)
        elif chain_broken:
            results[index] = (linked_failed, 0)
        else:
            code, ts = apply_one(index, event)
            results[index] = (code, ts)
            if code != created and chain_start >= 0:
                chain_broken = True
                state._rollback()
                for earlier in range(chain_start, index):
                    results[earlier] = (linked_failed, 0)
        if chain_start >= 0 and (not linked or index in ends):
            chain_start = -1
            chain_broken = False
            state._journal = None
    state._journal = None
    return results


def _account_exists(a: Account, e: Account) -> CreateAccountResult:
    if a.flags != e.flags:
        return AR.exists_with_different_flags
    if a.user_data_128 != e.user_data_128:
        return AR.exists_with_different_user_data_128
    if a.user_data_64 != e.user_data_64:
        return AR.exists_with_different_user_data_64
    if a.user_data_32 != e.user_data_32:
        return AR.exists_with_different_user_data_32
    if a.ledger != e.ledger:
        return AR.exists_with_different_ledger
    if a.code != e.code:
        return AR.exists_with_different_code
    return AR.exists


def _transfer_exists(t: Transfer, e: Transfer, p: Transfer | None = None) -> CreateTransferResult:
    """Compare a repeated id with the stored transfer, in TigerBeetle's order of fields.

    Post/void transfers may leave accounts, ledger, code and user data zero (they are taken from the
    pending transfer) and balancing transfers store the amount actually moved, so those fields
    compare only where the request set them.
    """
    if t.flags != e.flags:
        return TR.exists_with_different_flags
    if t.pending_id != e.pending_id:
        return TR.exists_with_different_pending_id
    if t.timeout != e.timeout:
        return TR.exists_with_different_timeout
    inherits = bool(t.flags & _POST_OR_VOID)
    if t.debit_account_id != e.debit_account_id and not (inherits and t.debit_account_id == 0):
        return TR.exists_with_different_debit_account_id
    if t.credit_account_id != e.credit_account_id and not (inherits and t.credit_account_id == 0):
        return TR.exists_with_different_credit_account_id
    # A post/void's zero fields stand for the pending transfer's (TigerBeetle's
    # post_or_void_pending_transfer_exists): AMOUNT_MAX (post) or 0 (void) means p.amount.
    base = p if inherits and p is not None and e.pending_id == p.id else None
    if _amount_differs(t, e, base):
        return TR.exists_with_different_amount
    if t.user_data_128 != e.user_data_128 and not (
        inherits and t.user_data_128 == 0 and (base is None or e.user_data_128 == base.user_data_128)
    ):
        return TR.exists_with_different_user_data_128
    if t.user_data_64 != e.user_data_64 and not (
        inherits and t.user_data_64 == 0 and (base is None or e.user_data_64 == base.user_data_64)
    ):
        return TR.exists_with_different_user_data_64
    if t.user_data_32 != e.user_data_32 and not (
        inherits and t.user_data_32 == 0 and (base is None or e.user_data_32 == base.user_data_32)
    ):
        return TR.exists_with_different_user_data_32
    if t.ledger != e.ledger and not (inherits and t.ledger == 0):
        return TR.exists_with_different_ledger
    if t.code != e.code and not (inherits and t.code == 0):
        return TR.exists_with_different_code
    return TR.exists


def _amount_differs(t: Transfer, e: Transfer, p: Transfer | None = None) -> bool:
    if t.flags & _POST:
        if t.amount == AMOUNT_MAX:
            return p is not None and e.amount != p.amount
        return t.amount != e.amount
    if t.flags & _VOID:
        if t.amount == 0:
            return p is not None and e.amount != p.amount
        return t.amount != e.amount
    if t.flags & _BALANCING:
        return t.amount < e.amount
    return t.amount != e.amount
