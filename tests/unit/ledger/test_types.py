"""Pure parts of the ledger: derived ids, balances on the normal side, field widths, precedence."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from paymanager.ledger import (
    Account,
    AccountFlags,
    CreateTransferResult,
    Transfer,
    account_id_for,
    balance_of,
)
from paymanager.ledger.types import validate_transfer

FEES_THB = 7674679673063274039917870184264647922
NOSTRO_IPPS_THB = 78310612738043785940994983565622259921


def test_system_account_ids_are_pinned() -> None:
    # Ids are stored: changing the derivation would orphan every system account.
    assert account_id_for("system.fees.THB") == FEES_THB
    assert account_id_for("system.nostro.ipps.THB") == NOSTRO_IPPS_THB


@given(st.text(min_size=1, max_size=64))
def test_derived_ids_are_valid_and_deterministic(name: str) -> None:
    first = account_id_for(name)
    assert 0 < first < 2**128 - 1
    assert account_id_for(name) == first
    assert account_id_for(name + ".") != first


def test_an_empty_name_has_no_id() -> None:
    with pytest.raises(ValueError):
        account_id_for("")


def test_available_balance_of_a_credit_normal_wallet_counts_pending_debits() -> None:
    wallet = Account(1, debits_pending=30, debits_posted=20, credits_pending=500, credits_posted=100,
                     flags=AccountFlags.DEBITS_MUST_NOT_EXCEED_CREDITS)  # fmt: skip
    balance = balance_of(wallet)
    assert (balance.normal, balance.posted, balance.pending, balance.available) == ("credit", 80, 470, 50)


def test_available_balance_of_a_debit_normal_nostro_counts_pending_credits() -> None:
    nostro = Account(1, debits_pending=7, debits_posted=100, credits_pending=10, credits_posted=40,
                     flags=AccountFlags.CREDITS_MUST_NOT_EXCEED_DEBITS)  # fmt: skip
    balance = balance_of(nostro)
    assert (balance.normal, balance.posted, balance.pending, balance.available) == ("debit", 60, -3, 50)
    assert balance_of(nostro, "credit").posted == -60


def test_values_wider_than_their_field_are_programmer_errors() -> None:
    validate_transfer(Transfer(2**128 - 1, amount=2**128 - 1, user_data_64=2**64 - 1))
    with pytest.raises(ValueError, match="user_data_32"):
        validate_transfer(Transfer(1, user_data_32=2**32))
    with pytest.raises(ValueError, match="amount"):
        validate_transfer(Transfer(1, amount=-1))


def test_result_codes_keep_tigerbeetles_precedence_and_wire_values() -> None:
    names = [r.name for r in CreateTransferResult]
    assert (
        names.index("exists") < names.index("id_already_failed") < names.index("accounts_must_be_different")
    )
    assert names.index("pending_transfer_expired") < names.index("exceeds_credits")
    assert CreateTransferResult.created == 0xFFFFFFFF
    assert CreateTransferResult.exceeds_credits == 54
    assert CreateTransferResult.pending_transfer_already_posted == 33
