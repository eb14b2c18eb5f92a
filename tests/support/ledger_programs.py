"""Hypothesis strategies for model-based tests: programs of account and transfer batches.

Ids are small integers so that duplicates, references to unknown ids and chains over the same
accounts are frequent; a test maps them into a fresh id space per example.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import strategies as st

from paymanager.ledger import AMOUNT_MAX, Account, AccountFlags, Transfer, TransferFlags

F = TransferFlags
A = AccountFlags

# The accounts every program starts with: small id -> (ledger, flags).
BASE_ACCOUNTS = {
    1: (1, 0),
    2: (1, 0),
    3: (1, A.DEBITS_MUST_NOT_EXCEED_CREDITS),
    4: (1, A.CREDITS_MUST_NOT_EXCEED_DEBITS),
    5: (1, A.CLOSED),
    6: (2, 0),
    7: (1, A.DEBITS_MUST_NOT_EXCEED_CREDITS),
}
ACCOUNT_IDS = [0, 1, 2, 3, 4, 5, 6, 7, 8]  # 8 is never created; 0 is invalid
TRANSFER_IDS = list(range(1, 25))
POST_IDS = list(range(25, 45))
AMOUNTS = [0, 1, 5, 10, 40, 100, AMOUNT_MAX, 1 << 62]
KINDS = [
    0,
    0,
    F.PENDING,
    F.PENDING,
    F.POST_PENDING_TRANSFER,
    F.POST_PENDING_TRANSFER,
    F.VOID_PENDING_TRANSFER,
    F.BALANCING_DEBIT,
    F.BALANCING_CREDIT,
    F.PENDING | F.BALANCING_DEBIT,
    F.POST_PENDING_TRANSFER | F.VOID_PENDING_TRANSFER,
]


def base_accounts() -> list[Account]:
    return [Account(id=i, ledger=ledger, code=1, flags=flags) for i, (ledger, flags) in BASE_ACCOUNTS.items()]


@st.composite
def transfers(draw: Any) -> Transfer:
    """Mostly well-formed transfers (so that posts, voids and limits are exercised), some wild ones."""
    if draw(st.integers(0, 9)) < 2:
        return draw(wild_transfers())
    kind = draw(
        st.sampled_from([0, 0, F.PENDING, F.PENDING, F.POST_PENDING_TRANSFER, F.VOID_PENDING_TRANSFER])
    )
    linked = F.LINKED if draw(st.integers(0, 9)) < 2 else 0
    if kind & (F.POST_PENDING_TRANSFER | F.VOID_PENDING_TRANSFER):
        return Transfer(
            id=draw(st.sampled_from(POST_IDS)),
            amount=draw(
                st.sampled_from(
                    [0, 0, 0, 5] if kind & F.VOID_PENDING_TRANSFER else [0, 5, AMOUNT_MAX, AMOUNT_MAX]
                )
            ),
            pending_id=draw(st.sampled_from(TRANSFER_IDS[:7])),
            user_data_32=draw(st.sampled_from([0, 0, 1])),
            flags=int(kind | linked),
        )
    debit, credit = draw(st.lists(st.sampled_from([1, 2, 3, 4, 7]), min_size=2, max_size=2, unique=True))
    return Transfer(
        id=draw(st.sampled_from(TRANSFER_IDS[:6] if kind else TRANSFER_IDS[12:])),
        debit_account_id=debit,
        credit_account_id=credit,
        amount=draw(st.sampled_from([1, 5, 10, 20, 40])),
        user_data_32=draw(st.sampled_from([0, 0, 1])),
        timeout=draw(st.sampled_from([0, 1, 3])) if kind else 0,
        ledger=1,
        code=1,
        flags=int(kind | linked),
    )


@st.composite
def wild_transfers(draw: Any) -> Transfer:
    kind = draw(st.sampled_from(KINDS))
    linked = F.LINKED if draw(st.integers(0, 9)) < 3 else 0
    two_phase = kind & (F.POST_PENDING_TRANSFER | F.VOID_PENDING_TRANSFER)
    return Transfer(
        id=draw(st.sampled_from(TRANSFER_IDS)) if draw(st.integers(0, 20)) else 0,
        debit_account_id=draw(st.sampled_from([0, 0, 0, 1, 3] if two_phase else [*ACCOUNT_IDS[1:], 0])),
        credit_account_id=draw(st.sampled_from([0, 0, 0, 2] if two_phase else ACCOUNT_IDS[1:])),
        amount=draw(st.sampled_from(AMOUNTS)),
        pending_id=draw(st.sampled_from(TRANSFER_IDS)) if two_phase else 0,
        user_data_32=draw(st.sampled_from([0, 0, 1])),
        timeout=draw(st.sampled_from([0, 0, 1, 3])) if kind & F.PENDING else 0,
        ledger=draw(st.sampled_from([0, 0, 0] if two_phase else [1, 1, 1, 1, 1, 2, 0])),
        code=draw(st.sampled_from([0, 0, 1] if two_phase else [1, 1, 1, 1, 2, 0])),
        flags=int(kind | linked),
    )


@st.composite
def accounts(draw: Any) -> Account:
    account_id = draw(st.sampled_from([0, 1, 2, 3, 8, 9]))
    ledger, flags = BASE_ACCOUNTS.get(account_id, (1, 0))
    flags = draw(st.sampled_from([flags, flags, 6, A.HISTORY, 1 << 4]))
    linked = A.LINKED if draw(st.integers(0, 9)) < 3 else 0
    return Account(
        id=account_id,
        ledger=draw(st.sampled_from([ledger, ledger, 0, 3])),
        code=draw(st.sampled_from([1, 1, 0, 2])),
        user_data_64=draw(st.sampled_from([0, 0, (1 << 64) - 1])),
        credits_posted=draw(st.sampled_from([0, 0, 0, 5])),
        flags=int(flags | linked),
    )


def steps() -> Any:
    """A program: a list of ("transfers", batch) | ("accounts", batch) | ("advance", s) | ("expire",)."""
    step = st.one_of(
        st.tuples(st.just("transfers"), st.lists(transfers(), min_size=1, max_size=10)),
        st.tuples(st.just("transfers"), st.lists(transfers(), min_size=1, max_size=10)),
        st.tuples(st.just("transfers"), st.lists(transfers(), min_size=1, max_size=10)),
        st.tuples(st.just("accounts"), st.lists(accounts(), min_size=1, max_size=3)),
        st.tuples(st.just("advance"), st.integers(0, 4)),
        st.tuples(st.just("advance"), st.integers(0, 4)),
        st.tuples(st.just("expire")),
    )
    return st.lists(step, min_size=1, max_size=16)


def funding() -> list[Transfer]:
    """Transfers that give the limited accounts something to spend, so that not everything fails."""
    return [
        Transfer(id=100, debit_account_id=4, credit_account_id=3, amount=60, ledger=1, code=1),
        Transfer(id=101, debit_account_id=4, credit_account_id=7, amount=30, ledger=1, code=1),
        Transfer(id=102, debit_account_id=1, credit_account_id=4, amount=20, ledger=1, code=1),
    ]


def map_ids(offset: int, value: Any) -> Any:
    """Move every id of an account or transfer by `offset` (0 stays 0: it is the invalid id)."""

    def shift(i: int) -> int:
        return i + offset if i else 0

    if isinstance(value, Account):
        return replace(value, id=shift(value.id))
    return replace(
        value,
        id=shift(value.id),
        debit_account_id=shift(value.debit_account_id),
        credit_account_id=shift(value.credit_account_id),
        pending_id=shift(value.pending_id),
    )
