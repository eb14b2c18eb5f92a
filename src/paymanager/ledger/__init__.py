"""The ledger: two-phase double-entry accounting with TigerBeetle's semantics.

A library: it knows nothing of payments. The `Ledger` port has two adapters, `PostgresLedger`
(the default) and `TigerBeetleLedger` (the optional `paymanager[tigerbeetle]` extra).

Semantics follow TigerBeetle 0.17: caller-chosen u128 ids (never 0 nor 2^128 - 1), `ledger` and
`code`, user data, the four balances, account and transfer flags with TigerBeetle's bit values,
two-phase transfers (pending, then post - full with `AMOUNT_MAX` or partial - or void), pending
timeouts, balancing transfers, linked chains that succeed or fail whole, idempotency by id
(`exists`, `exists_with_different_*`, `id_already_failed` after a transient failure), and result
codes with TigerBeetle's names in its order of precedence. `create_*` return one result per event,
successes included (0.17's dense shape): `AccountEventResult`/`TransferEventResult` with a
timestamp and the result code.

The PostgreSQL ledger applies a batch in one transaction with a fixed number of round trips (see
`postgres.py`); `create_transfers(..., conn=conn)` applies it inside the caller's open transaction
(a savepoint), so a job can commit its ledger effect with its own rows. Concurrent calls without
`conn` are coalesced into shared batches, as TigerBeetle's clients do; each call keeps its own
results and its own linked chains. `verify()` (`paymanager ledger verify`) checks that debits equal
credits (posted and pending), that every balance equals the sums of its transfers, that flags are
respected and that transfers refer to existing accounts.

Deliberate differences of the PostgreSQL ledger from TigerBeetle:
- Amounts and balances are bigint, so `overflows_*` fire at 2^63 - 1 rather than 2^128 - 1 (ample
  for minor units; it keeps the arithmetic and the columns native). `AMOUNT_MAX` (2^128 - 1) keeps
  its meaning as "the full pending amount" for posts and "no limit" for balancing transfers.
- Closing transfers (`closing_debit`/`closing_credit`) and imported events are not supported: they
  answer `reserved_flag`. The `closed` account flag set at creation is honoured
  (`debit_account_already_closed`/`credit_account_already_closed`).
- Expired pending transfers release their holds when `expire_pending(now)` runs (a periodic job) -
  TigerBeetle does it as its clock passes - so balances may show an expired hold until then, as
  TigerBeetle also allows; a post or void after expiry always fails with `pending_transfer_expired`.
- Timestamps come from the process clock (nanoseconds, unique per transfer, increasing within a
  process) instead of a cluster clock.
- TigerBeetle lets a batch's first event decide whether the whole batch is imported (the others
  then fail `imported_event_expected` or `imported_event_not_expected`); imported events are not
  supported here at all (`reserved_flag`, or `timestamp_must_be_zero` for the timestamp an imported
  event carries). The conformance suite checks both sides, TigerBeetle's on a real replica.
- `ledger_transfer` has no foreign keys to `ledger_account` (each insert would look its accounts up
  again, while the writer already holds them locked): the writer only writes transfers between
  accounts it holds locked, and `verify()` checks references. It stores its accounts' numbers
  (`ledger_account.number`, migration 0802), not their 16-byte ids: the batch functions translate,
  and every read joins back to the ids.
- `ledger_transfer` is partitioned by month of its timestamp (migration 0203): a transfer's timestamp
  must fall in a month whose partition exists (the process creates them ahead), and a month can be
  archived, after which its transfer ids are forgotten (`verify()` counts its sums, migration 0204).
  An id is unique per partition by the schema and across partitions by the batch writer.
- A resolved pending transfer keeps no state row (migration 0205): its state is read from the post or
  void that names it.
- A transfer's u32 and u16 fields are stored as the same bits in integer and smallint columns
  (migration 0206), converted in SQL both ways: every value of their widths is kept and read back.
"""

from paymanager.ledger._batch import BALANCE_MAX
from paymanager.ledger.connect import open_ledger
from paymanager.ledger.port import HISTORY_LIMIT_MAX, Ledger, TransactionalLedger
from paymanager.ledger.postgres import LedgerConflictError, PostgresLedger, Verification
from paymanager.ledger.system_accounts import SystemAccountMismatchError, account_id_for, ensure_accounts
from paymanager.ledger.tigerbeetle import TigerBeetleLedger
from paymanager.ledger.types import (
    AMOUNT_MAX,
    BATCH_MAX,
    Account,
    AccountEventResult,
    AccountFlags,
    AccountNotFoundError,
    Balance,
    BatchTooLargeError,
    CreateAccountResult,
    CreateAccountStatus,
    CreateTransferResult,
    CreateTransferStatus,
    LedgerError,
    LedgerUnavailableError,
    Normal,
    Transfer,
    TransferEventResult,
    TransferFlags,
    balance_of,
)

__all__ = [
    "AMOUNT_MAX",
    "BALANCE_MAX",
    "BATCH_MAX",
    "HISTORY_LIMIT_MAX",
    "Account",
    "AccountEventResult",
    "AccountFlags",
    "AccountNotFoundError",
    "Balance",
    "BatchTooLargeError",
    "CreateAccountResult",
    "CreateAccountStatus",
    "CreateTransferResult",
    "CreateTransferStatus",
    "Ledger",
    "LedgerConflictError",
    "LedgerError",
    "LedgerUnavailableError",
    "Normal",
    "PostgresLedger",
    "SystemAccountMismatchError",
    "TigerBeetleLedger",
    "TransactionalLedger",
    "Transfer",
    "TransferEventResult",
    "TransferFlags",
    "Verification",
    "account_id_for",
    "balance_of",
    "ensure_accounts",
    "open_ledger",
]
