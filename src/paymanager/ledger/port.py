"""The `Ledger` port: what the rest of paymanager may ask of a ledger, whatever its backend."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from paymanager.db.pool import Conn
from paymanager.ledger.types import (
    Account,
    AccountEventResult,
    Balance,
    Normal,
    Transfer,
    TransferEventResult,
)

HISTORY_LIMIT_MAX = 8189
"""At most this many transfers per history page (TigerBeetle's query limit)."""


def check_history_limit(limit: int) -> None:
    """The page size every adapter accepts for an account's history."""
    if not 0 < limit <= HISTORY_LIMIT_MAX:
        raise ValueError(f"limit must be within 1..{HISTORY_LIMIT_MAX}, got {limit}")


class Ledger(Protocol):
    """A two-phase double-entry ledger with TigerBeetle's semantics.

    `create_accounts` and `create_transfers` apply a batch atomically (events in order, linked
    chains whole) and return one result per event, successes included: TigerBeetle 0.17's dense
    shape, each result carrying a timestamp and a `CreateAccountResult`/`CreateTransferResult`.
    Expected failures are results; exceptions mean the ledger could not be asked.
    """

    async def create_accounts(self, accounts: Sequence[Account]) -> list[AccountEventResult]: ...

    async def create_transfers(self, transfers: Sequence[Transfer]) -> list[TransferEventResult]: ...

    async def lookup_accounts(self, ids: Sequence[int]) -> list[Account]:
        """The accounts that exist among `ids`, in the order asked (missing ones left out)."""
        ...

    async def lookup_transfers(self, ids: Sequence[int]) -> list[Transfer]: ...

    async def get_account_transfers(
        self,
        account_id: int,
        *,
        timestamp_min: int = 0,
        timestamp_max: int = 0,
        code: int = 0,
        limit: int = 100,
        reversed: bool = False,
    ) -> list[Transfer]:
        """Transfers debiting or crediting the account, by timestamp (inclusive bounds; 0 = open).

        Timestamps are unique: the next page starts at `timestamp_min = last.timestamp + 1`
        (or `timestamp_max = last.timestamp - 1` when reversed), TigerBeetle's way of paginating.
        """
        ...

    async def balance(self, account_id: int, normal: Normal | None = None) -> Balance:
        """The account's balance (see `balance_of`); raises `AccountNotFoundError`."""
        ...

    async def expire_pending(self, now: int | None = None, *, limit: int = 1000) -> int:
        """Release the holds of pending transfers whose timeout passed at `now` (ns; default: the clock).

        Returns how many expired (at most `limit`); a periodic job calls it. A backend that expires
        transfers by itself (TigerBeetle) returns 0.
        """
        ...

    async def ping(self) -> None:
        """Raise when the ledger cannot be reached."""
        ...

    async def close(self) -> None: ...


class TransactionalLedger(Ledger, Protocol):
    """A ledger whose batches can join the caller's open PostgreSQL transaction (`conn=`).

    On the PostgreSQL ledger payments hold, post and void inside the transaction that changes the
    intent; TigerBeetle cannot join that transaction, and payments follow the decide-then-apply
    protocol there instead (application/holds/resolve.py).
    `savepoint=False` (with `conn`): the batch takes no savepoint and a transient conflict
    raises `LedgerConflictError` for the caller to run its whole transaction again.
    """

    async def create_accounts(
        self, accounts: Sequence[Account], *, conn: Conn | None = None
    ) -> list[AccountEventResult]: ...

    async def create_transfers(
        self, transfers: Sequence[Transfer], *, conn: Conn | None = None, savepoint: bool = True
    ) -> list[TransferEventResult]: ...
