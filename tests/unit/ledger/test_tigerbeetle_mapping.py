"""The TigerBeetle adapter's translation, checked against the installed 0.17 client without a server.

The conformance suite runs on a real replica; these tests need none, and cover what can go wrong on
our side of the wire. Our result codes, flags and records mirror the client's name for name and
value for value, so a client upgrade that renames, renumbers, adds or widens anything fails here.
Round trips go through the client's own ctypes structs (`CAccount`, `CTransfer`,
`CCreateTransferResult`, ...), i.e. the bytes it sends and parses, with the field widths read from
those structs rather than restated. What still needs a server: the ledger's behaviour
itself (the conformance suite), the connection and the client's packet handling.

The client is imported unconditionally: it is in the `dev` extra, and skipping here when it is
missing would hide exactly what these tests are for.
"""

from __future__ import annotations

import ast
import ctypes
import dataclasses
import enum
import inspect
from typing import Any

import pytest
import tigerbeetle as tb
from hypothesis import example, given
from hypothesis import strategies as st
from tigerbeetle import bindings

from paymanager.ledger import _batch, postgres
from paymanager.ledger._batch import BALANCE_MAX
from paymanager.ledger.port import HISTORY_LIMIT_MAX
from paymanager.ledger.tigerbeetle import (
    _account_filter,
    _from_tb_account,
    _from_tb_account_result,
    _from_tb_transfer,
    _from_tb_transfer_result,
    _to_tb_account,
    _to_tb_transfer,
)
from paymanager.ledger.types import (
    AMOUNT_MAX,
    Account,
    AccountFlags,
    CreateAccountResult,
    CreateTransferResult,
    Transfer,
    TransferFlags,
    validate_account,
    validate_transfer,
)

# Flags the PostgreSQL ledger answers with `reserved_flag` (ledger/__init__.py lists them as
# deliberate differences). The TigerBeetle adapter passes every flag through: the server decides.
ACCOUNT_FLAGS_NOT_IMPLEMENTED = {AccountFlags.IMPORTED}
TRANSFER_FLAGS_NOT_IMPLEMENTED = {
    TransferFlags.CLOSING_DEBIT,
    TransferFlags.CLOSING_CREDIT,
    TransferFlags.IMPORTED,
}

# Statuses the PostgreSQL ledger never answers: imported events and closing transfers are not
# supported (their flags answer `reserved_flag`), and our `Account` has no reserved field to set.
# Our enums still carry them, so the TigerBeetle adapter maps whatever a server answers.
ACCOUNT_RESULTS_NOT_PRODUCED = {
    CreateAccountResult.imported_event_expected,
    CreateAccountResult.imported_event_not_expected,
    CreateAccountResult.imported_event_timestamp_out_of_range,
    CreateAccountResult.imported_event_timestamp_must_not_advance,
    CreateAccountResult.imported_event_timestamp_must_not_regress,
    CreateAccountResult.reserved_field,
}
TRANSFER_RESULTS_NOT_PRODUCED = {
    CreateTransferResult.imported_event_expected,
    CreateTransferResult.imported_event_not_expected,
    CreateTransferResult.imported_event_timestamp_out_of_range,
    CreateTransferResult.imported_event_timestamp_must_not_advance,
    CreateTransferResult.imported_event_timestamp_must_not_regress,
    CreateTransferResult.imported_event_timestamp_must_postdate_debit_account,
    CreateTransferResult.imported_event_timestamp_must_postdate_credit_account,
    CreateTransferResult.imported_event_timeout_must_be_zero,
    CreateTransferResult.closing_transfer_must_be_pending,
}


def _names_and_values(members: type[enum.Enum]) -> list[tuple[str, int]]:
    """Members in declaration order (TigerBeetle's precedence for results), names upper-cased."""
    return [(m.name.upper(), m.value) for m in members]


# --- result codes, flags, constants --------------------------------------------------------------


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (CreateAccountResult, bindings.CreateAccountStatus),
        (CreateTransferResult, bindings.CreateTransferStatus),
    ],
)
def test_result_codes_are_the_clients_statuses_in_its_order(
    ours: type[enum.IntEnum], theirs: type[enum.IntEnum]
) -> None:
    # Exact equality, no allow-list: a status the client knows and we lack would make the adapter
    # raise ValueError on a server's answer. The order is the precedence `types.py` documents.
    assert _names_and_values(ours) == _names_and_values(theirs)


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [(AccountFlags, bindings.AccountFlags), (TransferFlags, bindings.TransferFlags)],
)
def test_flags_have_the_clients_names_and_bits(ours: type[enum.IntFlag], theirs: type[enum.IntFlag]) -> None:
    assert _names_and_values(ours) == _names_and_values(theirs)


def test_the_flags_the_postgres_ledger_does_not_implement_are_the_listed_ones() -> None:
    # If the PostgreSQL ledger starts supporting a flag, this list (and ledger/__init__.py) changes.
    supported_account = _batch._ACCOUNT_FLAGS_SUPPORTED
    supported_transfer = _batch._TRANSFER_FLAGS_SUPPORTED
    assert {f for f in AccountFlags if f and not f & supported_account} == ACCOUNT_FLAGS_NOT_IMPLEMENTED
    assert {f for f in TransferFlags if f and not f & supported_transfer} == TRANSFER_FLAGS_NOT_IMPLEMENTED


def _results_named_in(modules: list[Any], results: type[enum.IntEnum], aliases: set[str]) -> set[int]:
    """Values of `results` spelt out as `Alias.member` in the modules' source: what their rules answer.

    Values, not members, and one enum at a time: IntEnum members of both result enums compare
    equal when their codes are (account `reserved_field` and transfer `reserved_flag` are both 4).
    """
    named: set[int] = set()
    for module in modules:
        for node in ast.walk(ast.parse(inspect.getsource(module))):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and node.attr in results.__members__
            ):
                named.add(results[node.attr].value)
    return named


@pytest.mark.parametrize(
    ("results", "aliases", "not_produced"),
    [
        (CreateAccountResult, {"AR", "CreateAccountResult"}, ACCOUNT_RESULTS_NOT_PRODUCED),
        (CreateTransferResult, {"TR", "CreateTransferResult"}, TRANSFER_RESULTS_NOT_PRODUCED),
    ],
)
def test_the_statuses_the_postgres_ledger_never_answers_are_the_listed_ones(
    results: type[enum.IntEnum], aliases: set[str], not_produced: set[enum.IntEnum]
) -> None:
    # The PostgreSQL ledger names every result it answers literally (AR.x / TR.x in _batch.py, the
    # enum's own name in postgres.py); a member missing from both the source and this list, or a
    # listed one that appears, means the list (and ledger/__init__.py's differences) is out of date.
    answered = _results_named_in([_batch, postgres], results, aliases)
    assert {r.value for r in results} - answered == {r.value for r in not_produced}


def test_amount_max_is_the_clients() -> None:
    assert AMOUNT_MAX == tb.AMOUNT_MAX == 2**128 - 1


# --- records: widths from the client's structs, round trips through them ---------------------------


def _widths_bits(struct: type[ctypes.Structure]) -> dict[str, int]:
    """Field name -> width in bits, in wire order, without the padding TigerBeetle calls reserved."""
    return {name: ctypes.sizeof(ctype) * 8 for name, ctype, *_ in struct._fields_ if name != "reserved"}


ACCOUNT_BITS = _widths_bits(bindings.CAccount)
TRANSFER_BITS = _widths_bits(bindings.CTransfer)


@pytest.mark.parametrize(("record", "bits"), [(Account, ACCOUNT_BITS), (Transfer, TRANSFER_BITS)])
def test_records_have_the_clients_fields_in_its_order(record: type, bits: dict[str, int]) -> None:
    # The adapter builds our records positionally from the client's: the order matters.
    assert [f.name for f in dataclasses.fields(record)] == list(bits)


def _records(record: type, bits: dict[str, int]) -> st.SearchStrategy[Any]:
    return st.builds(record, **{name: st.integers(0, (1 << width) - 1) for name, width in bits.items()})


def _at(record: type, bits: dict[str, int], value_of: Any) -> Any:
    return record(**{name: value_of(width) for name, width in bits.items()})


def _through_the_wire(struct: Any, theirs: Any) -> Any:
    """What the client packs for a record and what it would parse back from the same bytes."""
    packed = struct.from_param(theirs)
    return type(packed).from_buffer_copy(bytes(packed)).to_python()


@given(_records(Account, ACCOUNT_BITS))
@example(_at(Account, ACCOUNT_BITS, lambda width: (1 << width) - 1))
# Wider than the PostgreSQL ledger's bigint balances, which the TigerBeetle adapter must carry intact.
@example(_at(Account, ACCOUNT_BITS, lambda width: min(BALANCE_MAX + 1, (1 << width) - 1)))
@example(Account(1))
def test_an_account_survives_the_translation_both_ways(account: Account) -> None:
    validate_account(account)  # every value the client's fields hold is one we accept
    theirs = _to_tb_account(tb, account)
    assert isinstance(theirs, tb.Account)
    assert isinstance(theirs.flags, tb.AccountFlags)
    assert _from_tb_account(theirs) == account
    assert _from_tb_account(_through_the_wire(bindings.CAccount, theirs)) == account


@given(_records(Transfer, TRANSFER_BITS))
@example(_at(Transfer, TRANSFER_BITS, lambda width: (1 << width) - 1))
# Wider than the PostgreSQL ledger's bigint balances, which the TigerBeetle adapter must carry intact.
@example(_at(Transfer, TRANSFER_BITS, lambda width: min(BALANCE_MAX + 1, (1 << width) - 1)))
@example(Transfer(1, amount=AMOUNT_MAX, flags=TransferFlags.POST_PENDING_TRANSFER))
def test_a_transfer_survives_the_translation_both_ways(transfer: Transfer) -> None:
    validate_transfer(transfer)
    theirs = _to_tb_transfer(tb, transfer)
    assert isinstance(theirs, tb.Transfer)
    assert isinstance(theirs.flags, tb.TransferFlags)
    assert _from_tb_transfer(theirs) == transfer
    assert _from_tb_transfer(_through_the_wire(bindings.CTransfer, theirs)) == transfer


@pytest.mark.parametrize("field", list(ACCOUNT_BITS))
def test_an_account_value_wider_than_the_clients_field_is_refused_before_the_client(field: str) -> None:
    # The client raises for most fields but truncates `flags` to 16 bits silently: ours is the check
    # that keeps a wide flag from becoming a different one.
    with pytest.raises(ValueError, match=field):
        validate_account(Account(**{"id": 1, field: 1 << ACCOUNT_BITS[field]}))


@pytest.mark.parametrize("field", list(TRANSFER_BITS))
def test_a_transfer_value_wider_than_the_clients_field_is_refused_before_the_client(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        validate_transfer(Transfer(**{"id": 1, field: 1 << TRANSFER_BITS[field]}))


# --- results and queries -------------------------------------------------------------------------

U64_MAX = (1 << 64) - 1


@pytest.mark.parametrize("status", list(bindings.CreateAccountStatus), ids=lambda s: s.name)
def test_every_account_status_maps_to_our_result_of_the_same_name(status: enum.IntEnum) -> None:
    wire = bindings.CCreateAccountResult(timestamp=U64_MAX, status=status.value).to_python()
    ours = _from_tb_account_result(wire)
    assert (ours.result.name.upper(), ours.result.value, ours.timestamp) == (status.name, status, U64_MAX)
    assert ours.ok == (status.name in ("CREATED", "EXISTS"))


@pytest.mark.parametrize("status", list(bindings.CreateTransferStatus), ids=lambda s: s.name)
def test_every_transfer_status_maps_to_our_result_of_the_same_name(status: enum.IntEnum) -> None:
    wire = bindings.CCreateTransferResult(timestamp=U64_MAX, status=status.value).to_python()
    ours = _from_tb_transfer_result(wire)
    assert (ours.result.name.upper(), ours.result.value, ours.timestamp) == (status.name, status, U64_MAX)
    assert ours.ok == (status.name in ("CREATED", "EXISTS"))


@given(
    account_id=st.integers(0, (1 << 128) - 1),
    timestamp_min=st.integers(0, U64_MAX),
    timestamp_max=st.integers(0, U64_MAX),
    code=st.integers(0, (1 << 16) - 1),
    limit=st.integers(1, HISTORY_LIMIT_MAX),
    reversed=st.booleans(),
)
def test_an_account_history_query_asks_for_both_sides_of_the_account(
    account_id: int, timestamp_min: int, timestamp_max: int, code: int, limit: int, reversed: bool
) -> None:
    query = _account_filter(
        tb, account_id, timestamp_min=timestamp_min, timestamp_max=timestamp_max, code=code, limit=limit,
        reversed=reversed,
    )  # fmt: skip
    sent = _through_the_wire(bindings.CAccountFilter, query)
    flags = tb.AccountFilterFlags.DEBITS | tb.AccountFilterFlags.CREDITS
    if reversed:
        flags |= tb.AccountFilterFlags.REVERSED
    assert sent == tb.AccountFilter(
        account_id=account_id, user_data_128=0, user_data_64=0, user_data_32=0, code=code,
        timestamp_min=timestamp_min, timestamp_max=timestamp_max, limit=limit, flags=flags,
    )  # fmt: skip
