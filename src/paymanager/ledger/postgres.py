"""The PostgreSQL ledger: TigerBeetle's semantics on the tables of migration 0200.

A batch costs a fixed number of round trips whatever its size: `BEGIN`; one call of the function
`ledger_batch_load` that locks every touched account once, in id order (those named by the events
and those of the pending transfers they post or void), then reads the transfers, pending states and
failed ids the batch refers to; the events are applied in memory (`_batch.BatchState`); one call
of the function `ledger_batch_write` (migration 0202) writes transfers, balances, pending states and
burned ids from `unnest`ed arrays; `COMMIT`. Both functions run on generic plans pinned to index
lookups, made once per connection, whatever the batch size or the size of the tables.
Locking in id order makes concurrent batches wait for each other instead of deadlocking, and is
what keeps a `debits_must_not_exceed_credits` account from going negative under concurrency; the
schema's CHECK constraints enforce the same limits a second time.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import asyncpg

from paymanager import tracing
from paymanager.db.pool import Conn, Pool, create_pool
from paymanager.db.sql import load_queries
from paymanager.ledger._batch import PENDING, BatchState, PendingState
from paymanager.ledger.metrics import count_transfers
from paymanager.ledger.port import TransactionalLedger, check_history_limit
from paymanager.ledger.types import (
    BATCH_MAX,
    U16_MAX,
    U128_MAX,
    Account,
    AccountEventResult,
    AccountNotFoundError,
    Balance,
    BatchTooLargeError,
    CreateTransferResult,
    Normal,
    Transfer,
    TransferEventResult,
    TransferFlags,
    balance_of,
    validate_account,
    validate_transfer,
)

Q = load_queries("paymanager.ledger", "ledger.sql")

T = TypeVar("T")
E = TypeVar("E")

# A batch is retried when a concurrent batch created the same id first (the unique index tells us),
# created a pending transfer this one references between our two reads, or deadlocked with it on
# the unique index; all are rare.
_ATTEMPTS_MAX = 5
_POST_OR_VOID = int(TransferFlags.POST_PENDING_TRANSFER | TransferFlags.VOID_PENDING_TRANSFER)
_TWO_TO_64 = 1 << 64
_I64_MAX = (1 << 63) - 1
_VERIFY_ROWS_MAX = 100
_TIMESTAMP_JUMP_NS_MAX = 1_000_000


@dataclass(slots=True)
class _Request:
    """A `create_transfers` call waiting for a batch to carry it."""

    transfers: Sequence[Transfer]
    results: asyncio.Future[list[TransferEventResult]]


class _StaleReadError(Exception):
    """A referenced pending transfer appeared after its accounts were chosen for locking: retry."""


class LedgerConflictError(Exception):
    """A batch applied in the caller's transaction with `savepoint=False` met one of the transient
    conflicts the ledger otherwise retries itself (see `_attempts`): the caller's transaction is
    aborted, and running it again whole is the retry."""


# The conflicts a batch starts again after (see `_after_conflict`).
_TRANSIENT = (asyncpg.UniqueViolationError, _StaleReadError, asyncpg.DeadlockDetectedError)


def _uuid(value: int) -> str:
    # asyncpg parses 32 hex digits in C, where uuid.UUID objects would be built in Python.
    return f"{value:032x}"


# Array parameters travel as one text literal each ('{...}', cast to the array type in SQL): a
# join of formatted numbers is cheaper than asyncpg's binary array encoder, which checks every
# element's type in Python. Every element is a number or a name of ours, so nothing needs quoting.
def _uuids(values: Iterable[int]) -> str:
    # The 16 bytes of every id, joined, turned into hex in one call with a comma every 16 bytes,
    # rather than a format call per id (`f"{v:032x}"`). `to_bytes` raises
    # OverflowError for a value outside u128, which validation excludes.
    return "{" + b"".join([v.to_bytes(16, "big") for v in values]).hex(",", 16) + "}"


def _opt_uuids(values: Sequence[int]) -> str:
    """Zero (no id) becomes NULL."""
    if not any(values):
        return "{" + ",".join(["NULL"] * len(values)) + "}"
    return "{" + ",".join([f"{v:032x}" if v else "NULL" for v in values]) + "}"


def _ints(values: Sequence[int]) -> str:
    # Most columns of a batch hold one value throughout (flags, ledger, code, user data, zero
    # pending balances): counting it is a C loop, and then one number is formatted instead of all.
    if values and values.count(values[0]) == len(values):
        return "{" + ",".join([str(values[0])] * len(values)) + "}"
    return "{" + ",".join(map(str, values)) + "}"


def _opt_ints(values: Iterable[int]) -> str:
    """Zero (none) becomes NULL."""
    return "{" + ",".join([str(v) if v else "NULL" for v in values]) + "}"


def _names(values: list[str]) -> str:
    assert all(v.isidentifier() for v in values), values
    return "{" + ",".join(values) + "}"


def _i64(value: int) -> int:
    """A u64 as the bigint holding the same 64 bits."""
    return value - _TWO_TO_64 if value > _I64_MAX else value


def _u64(value: int) -> int:
    return value + _TWO_TO_64 if value < 0 else value


def _account_from_row(r: Any) -> Account:
    return Account(r[0].int, r[1], r[2], r[3], r[4], r[5].int, _u64(r[6]), r[7], r[8], r[9], r[10], r[11])


def _transfer_from_row(r: Any) -> Transfer:
    pending_id = r[4]
    return Transfer(
        r[0].int, r[1].int, r[2].int, r[3], pending_id.int if pending_id is not None else 0, r[5].int,
        _u64(r[6]), r[7], r[8], r[9], r[10], r[11], r[12],
    )  # fmt: skip


def _valid_ids(ids: Any) -> list[str]:
    return [_uuid(i) for i in ids if 0 < i < U128_MAX]


def _valid_uuids(ids: Iterable[int]) -> str:
    """`_valid_ids` as one text literal."""
    return _uuids([i for i in ids if 0 < i < U128_MAX])


@dataclass(frozen=True, slots=True)
class Verification:
    """The outcome of `PostgresLedger.verify`: the totals and every violated invariant found."""

    accounts: int
    transfers: int
    debits_pending: int
    debits_posted: int
    credits_pending: int
    credits_posted: int
    violations: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations


class PostgresLedger:
    """The default ledger. `conn=` applies a batch inside the caller's open transaction."""

    def __init__(
        self,
        pool: Pool,
        *,
        clock: Callable[[], int] = time.time_ns,
        owns_pool: bool = False,
        coalesce: bool = True,
        batches_in_flight: int = 2,
    ) -> None:
        """`coalesce`: concurrent `create_transfers` calls without `conn` share batches, as
        TigerBeetle's clients do, with at most `batches_in_flight` batches running at once."""
        assert 1 <= batches_in_flight <= 64, batches_in_flight
        self._pool = pool
        self._clock = clock
        self._owns_pool = owns_pool
        self._last_timestamp = 0
        self._coalesce = coalesce
        self._batches_in_flight_max = batches_in_flight
        self._batches_in_flight = 0
        self._waiting: deque[_Request] = deque()
        self._tasks: set[asyncio.Task[None]] = set()

    @classmethod
    async def connect(
        cls, dsn: str, *, max_size: int = 4, clock: Callable[[], int] = time.time_ns
    ) -> PostgresLedger:
        """A ledger with a pool of its own (closed by `close`), for the CLI and benchmarks."""
        pool = await create_pool(dsn, min_size=1, max_size=max_size, application_name="paymanager:ledger")
        return cls(pool, clock=clock, owns_pool=True)

    # --- writes --------------------------------------------------------------------------------

    async def create_accounts(
        self, accounts: Sequence[Account], *, conn: Conn | None = None
    ) -> list[AccountEventResult]:
        _check_batch(len(accounts))
        for account in accounts:
            validate_account(account)
        if not accounts:
            return []
        if tracing.enabled():
            with tracing.span(
                "ledger.create_accounts", {"ledger.backend": "postgres", "ledger.events": len(accounts)}
            ):
                return await self._run(conn, self._apply_accounts, accounts)
        return await self._run(conn, self._apply_accounts, accounts)

    async def create_transfers(
        self, transfers: Sequence[Transfer], *, conn: Conn | None = None, savepoint: bool = True
    ) -> list[TransferEventResult]:
        """`savepoint=False` (with `conn`): the batch takes no savepoint in the caller's transaction,
        two round trips fewer, and a transient conflict raises `LedgerConflictError` for the caller
        to run its transaction again, instead of being retried here."""
        _check_batch(len(transfers))
        for transfer in transfers:
            validate_transfer(transfer)
        if not transfers:
            return []
        if tracing.enabled():
            with tracing.span(
                "ledger.create_transfers", {"ledger.backend": "postgres", "ledger.events": len(transfers)}
            ):
                return await self._create_transfers(transfers, conn, savepoint)
        return await self._create_transfers(transfers, conn, savepoint)

    async def _create_transfers(
        self, transfers: Sequence[Transfer], conn: Conn | None, savepoint: bool
    ) -> list[TransferEventResult]:
        if conn is not None and not savepoint:
            results = await self._once(conn, self._apply_transfers, (transfers, None))
        elif conn is not None or not self._coalesce:
            results = await self._run(conn, self._apply_transfers, (transfers, None))
        else:
            request = _Request(transfers, asyncio.get_running_loop().create_future())
            self._waiting.append(request)
            self._start_batches()
            results = await request.results
        count_transfers(results)
        return results

    def _start_batches(self) -> None:
        """Start a batch for the waiting requests while fewer than the limit are in flight.

        A request whose caller gave up (cancelled) before its batch started is dropped: it must not
        move money behind the back of a caller that was told it failed.
        """
        while self._waiting and self._batches_in_flight < self._batches_in_flight_max:
            _drop_abandoned(self._waiting)
            if not self._waiting:
                return
            group = [self._waiting.popleft()]
            size = len(group[0].transfers)
            while self._waiting and size + len(self._waiting[0].transfers) <= BATCH_MAX:
                if self._waiting[0].results.done():
                    self._waiting.popleft()
                    continue
                size += len(self._waiting[0].transfers)
                group.append(self._waiting.popleft())
            self._batches_in_flight += 1
            task = asyncio.create_task(self._run_group(group))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run_group(self, group: list[_Request]) -> None:
        try:
            events: list[Transfer] = []
            ends: set[int] = set()
            for request in group:
                events.extend(request.transfers)
                ends.add(len(events) - 1)
            results = await self._run(None, self._apply_transfers, (events, ends))
            start = 0
            for request in group:
                end = start + len(request.transfers)
                if not request.results.done():  # a caller that gave up was cancelled
                    request.results.set_result(results[start:end])
                start = end
        except Exception as exc:
            for request in group:
                if not request.results.done():
                    request.results.set_exception(exc)
        except BaseException:
            # Cancelled (the loop is shutting down): the callers learn it the same way.
            for request in group:
                request.results.cancel()
            raise
        finally:
            self._batches_in_flight -= 1
            self._start_batches()

    async def expire_pending(
        self, now: int | None = None, *, limit: int = 1000, conn: Conn | None = None
    ) -> int:
        """Release the holds of pending transfers whose timeout passed at `now` (ns); at most `limit`.

        Returns how many expired; a periodic job calls it until it returns less than `limit`.
        A post or void after expiry fails with `pending_transfer_expired` whether or not this ran.
        """
        assert 0 < limit <= BATCH_MAX, limit
        moment = self._clock() if now is None else now
        return await self._run(conn, self._apply_expiry, (moment, limit))

    async def _run(self, conn: Conn | None, apply: Callable[[Conn, E], Awaitable[T]], events: E) -> T:
        if conn is not None:
            return await self._attempts(conn, apply, events)
        async with self._pool.acquire() as own:
            return await self._attempts(own, apply, events)

    async def _attempts(self, conn: Conn, apply: Callable[[Conn, E], Awaitable[T]], events: E) -> T:
        # Inside the caller's transaction `conn.transaction()` is a savepoint, so a retry undoes only
        # this batch.
        for attempt in range(1, _ATTEMPTS_MAX + 1):
            try:
                async with conn.transaction():
                    return await apply(conn, events)
            except _TRANSIENT as exc:
                self._after_conflict(exc)
                if attempt == _ATTEMPTS_MAX:
                    raise
        raise AssertionError("unreachable")

    async def _once(self, conn: Conn, apply: Callable[[Conn, E], Awaitable[T]], events: E) -> T:
        """One attempt without a savepoint: the caller retries its whole transaction on a conflict."""
        try:
            return await apply(conn, events)
        except _TRANSIENT as exc:
            self._after_conflict(exc)
            raise LedgerConflictError(repr(exc)) from exc

    def _after_conflict(self, exc: Exception) -> None:
        # A deadlock needs two batches that wait on each other's new ids in the unique index (their
        # account locks are taken in one order); PostgreSQL breaks it by failing one of them, which
        # starts again, as does a batch that lost a race to insert the same id or read stale state.
        if isinstance(exc, asyncpg.UniqueViolationError) and (
            exc.constraint_name == "ledger_transfer_timestamp_key"
        ):
            # Another process took these nanoseconds (clocks agree to the nanosecond more often than
            # one would think under load): jump past them by a random step.
            self._last_timestamp += secrets.randbelow(_TIMESTAMP_JUMP_NS_MAX) + 1

    def _next_timestamp(self, count: int) -> int:
        base = max(self._clock(), self._last_timestamp + 1)
        self._last_timestamp = base + count - 1
        return base

    async def _apply_accounts(self, conn: Conn, accounts: Sequence[Account]) -> list[AccountEventResult]:
        rows = await conn.fetch(Q["account_select_many"], _valid_ids({a.id for a in accounts}))
        state = BatchState.from_accounts([_account_from_row(r) for r in rows])
        results = state.create_accounts(accounts, self._next_timestamp(len(accounts)))
        created = state.created_accounts
        if created:
            await conn.execute(
                Q["account_insert_many"],
                [_uuid(a.id) for a in created],
                [_uuid(a.user_data_128) for a in created],
                [_i64(a.user_data_64) for a in created],
                [a.user_data_32 for a in created],
                [a.ledger for a in created],
                [a.code for a in created],
                [int(a.flags) for a in created],
                [a.timestamp for a in created],
            )
        return results

    async def _apply_transfers(
        self, conn: Conn, batch: tuple[Sequence[Transfer], set[int] | None]
    ) -> list[TransferEventResult]:
        transfers, ends = batch
        state = await self._load(conn, transfers)
        timestamp = self._next_timestamp(len(transfers))
        results = state.create_transfers(transfers, timestamp, ends)
        await _write(conn, state, timestamp)
        return results

    async def _load(self, conn: Conn, transfers: Sequence[Transfer]) -> BatchState:
        account_ids: set[int] = set()
        pending_ids: set[int] = set()
        for t in transfers:
            account_ids.add(t.debit_account_id)
            account_ids.add(t.credit_account_id)
            if t.flags & _POST_OR_VOID:
                pending_ids.add(t.pending_id)
        state = await _load_batch(conn, account_ids, pending_ids, {t.id for t in transfers})
        for pending_id in pending_ids:
            p = state.transfers.get(pending_id)
            if p is not None and not (
                p.debit_account_id in state.account_rules and p.credit_account_id in state.account_rules
            ):
                raise _StaleReadError
        return state

    async def _apply_expiry(self, conn: Conn, args: tuple[int, int]) -> int:
        now, limit = args
        candidates = await conn.fetch(Q["pending_expired_candidates"], now, limit)
        if not candidates:
            return 0
        account_ids = {r[1].int for r in candidates} | {r[2].int for r in candidates}
        state = await _load_batch(conn, account_ids, set(), {r[0].int for r in candidates})
        expired = 0
        for pending_id, pending in list(state.pending.items()):
            # Re-checked under the account locks: a concurrent post may have resolved it meanwhile.
            if pending.state == PENDING and 0 < pending.expires_at <= now:
                state.expire(pending_id)
                expired += 1
        await _write(conn, state, self._next_timestamp(1))
        return expired

    # --- reads ---------------------------------------------------------------------------------

    async def lookup_accounts(self, ids: Sequence[int]) -> list[Account]:
        _check_batch(len(ids))
        rows = await self._pool.fetch(Q["account_select_many"], _valid_ids(ids))
        found = {a.id: a for a in map(_account_from_row, rows)}
        return [found[i] for i in ids if i in found]

    async def lookup_transfers(self, ids: Sequence[int]) -> list[Transfer]:
        _check_batch(len(ids))
        rows = await self._pool.fetch(Q["transfer_select_many"], _valid_ids(ids))
        found = {t.id: t for t in map(_transfer_from_row, rows)}
        return [found[i] for i in ids if i in found]

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
        check_history_limit(limit)
        # No transfer has an account id or a code outside their widths (the code is stored in a
        # smallint, which could not hold one past u16).
        if not 0 < account_id < U128_MAX or not 0 <= code <= U16_MAX:
            return []
        name = "account_transfers_page_reversed" if reversed else "account_transfers_page"
        upper = timestamp_max if timestamp_max else _I64_MAX
        rows = await self._pool.fetch(
            Q[name], _uuid(account_id), min(timestamp_min, _I64_MAX), min(upper, _I64_MAX), code, limit
        )
        return [_transfer_from_row(r) for r in rows]

    async def balance(self, account_id: int, normal: Normal | None = None) -> Balance:
        found = await self.lookup_accounts([account_id])
        if not found:
            raise AccountNotFoundError(account_id)
        return balance_of(found[0], normal)

    async def list_accounts(self, *, after: int = 0, limit: int = 100, ledger: int = 0) -> list[Account]:
        """Accounts in id order after `after` (keyset pagination), for the CLI and operators."""
        check_history_limit(limit)
        rows = await self._pool.fetch(Q["account_list"], _uuid(after), limit, ledger)
        return [_account_from_row(r) for r in rows]

    async def verify(self) -> Verification:
        """Check the ledger's invariants; every violation found is described in `violations`."""
        async with self._pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
            totals = await conn.fetchrow(Q["ledger_verify_totals"])
            sums = await conn.fetch(Q["ledger_verify_account_sums"], _VERIFY_ROWS_MAX)
            flags = await conn.fetch(Q["ledger_verify_flags"], _VERIFY_ROWS_MAX)
            pending = await conn.fetch(Q["ledger_verify_pending"], _VERIFY_ROWS_MAX)
            dangling = await conn.fetch(Q["ledger_verify_references"], _VERIFY_ROWS_MAX)
            duplicated = await conn.fetch(Q["ledger_verify_duplicate_ids"], _VERIFY_ROWS_MAX)
        assert totals is not None
        result = Verification(
            accounts=totals["accounts"],
            transfers=totals["transfers"],
            debits_pending=int(totals["debits_pending"]),
            debits_posted=int(totals["debits_posted"]),
            credits_pending=int(totals["credits_pending"]),
            credits_posted=int(totals["credits_posted"]),
        )
        if result.debits_pending != result.credits_pending:
            result.violations.append(
                f"sum of debits_pending {result.debits_pending} != "
                f"sum of credits_pending {result.credits_pending}"
            )
        if result.debits_posted != result.credits_posted:
            result.violations.append(
                f"sum of debits_posted {result.debits_posted} != "
                f"sum of credits_posted {result.credits_posted}"
            )
        for r in sums:
            result.violations.append(
                f"account {r['id'].int}: balances (dp={r['debits_pending']}, dpo={r['debits_posted']}, "
                f"cp={r['credits_pending']}, cpo={r['credits_posted']}) != sums of its transfers "
                f"(dp={r['sum_debits_pending']}, dpo={r['sum_debits_posted']}, "
                f"cp={r['sum_credits_pending']}, cpo={r['sum_credits_posted']})"
            )
        for r in flags:
            result.violations.append(f"account {r['id'].int}: balances break its flags {r['flags']}")
        for r in pending:
            result.violations.append(f"pending transfer {r['id'].int}: missing or inconsistent pending state")
        for r in dangling:
            result.violations.append(f"transfer {r['id'].int}: refers to an account that does not exist")
        for r in duplicated:
            result.violations.append(f"transfer {r['id'].int}: its id is in more than one partition")
        return result

    async def ping(self) -> None:
        await self._pool.fetchval(Q["ledger_ping"])

    async def close(self) -> None:
        # Let batches already started finish: their callers are waiting for the outcome.
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._owns_pool:
            await self._pool.close()


def _drop_abandoned(waiting: deque[_Request]) -> None:
    while waiting and waiting[0].results.done():
        waiting.popleft()


def _check_batch(size: int) -> None:
    if size > BATCH_MAX:
        raise BatchTooLargeError(size, BATCH_MAX)


async def _load_batch(conn: Conn, account_ids: set[int], pending_ids: set[int], ids: set[int]) -> BatchState:
    """Lock the accounts and read the transfers a batch touches, in one round trip."""
    state = BatchState()
    rows = await conn.fetch(
        Q["batch_load"], _valid_uuids(account_ids), _valid_uuids(pending_ids), _valid_uuids(ids)
    )
    for r in rows:
        kind = r[0]
        if kind == "A":
            state.add_account_rules(r[1].int, r[12], r[14], (r[6], r[7], r[8], r[9]))
        elif kind == "T":
            pending_id = r[4]
            transfer = Transfer(
                r[1].int, r[2].int, r[3].int, r[6], pending_id.int if pending_id is not None else 0, r[5].int,
                _u64(r[7]), r[8], r[9], r[10], r[11], r[12], r[13],
            )  # fmt: skip
            state.transfers[transfer.id] = transfer
            if r[16] is not None:
                state.pending[transfer.id] = PendingState(r[16], r[14] or 0)
        else:
            state.failed[r[1].int] = CreateTransferResult[r[16]]
    return state


async def _write(conn: Conn, state: BatchState, timestamp: int) -> None:
    created = state.created_transfers
    changed = state.changed_balances
    pending = state.changed_pending
    failed = state.new_failed
    if not (created or changed or pending or failed):
        return
    balances = [state.balances[i] for i in changed]
    pending_transfers = [state.transfers[i] for i in pending]
    await conn.execute(
        Q["batch_write"],
        _uuids([t.id for t in created]),
        _uuids([t.debit_account_id for t in created]),
        _uuids([t.credit_account_id for t in created]),
        _ints([t.amount for t in created]),
        _opt_uuids([t.pending_id for t in created]),
        _uuids([t.user_data_128 for t in created]),
        _ints([_i64(t.user_data_64) for t in created]),
        _ints([t.user_data_32 for t in created]),
        _ints([t.timeout for t in created]),
        _ints([t.ledger for t in created]),
        _ints([t.code for t in created]),
        _ints([t.flags for t in created]),
        _ints([t.timestamp for t in created]),
        _uuids(changed),
        _ints([b[0] for b in balances]),
        _ints([b[1] for b in balances]),
        _ints([b[2] for b in balances]),
        _ints([b[3] for b in balances]),
        _uuids([t.id for t in pending_transfers]),
        _uuids([t.debit_account_id for t in pending_transfers]),
        _uuids([t.credit_account_id for t in pending_transfers]),
        _ints([t.amount for t in pending_transfers]),
        _names([state.pending[t.id].state for t in pending_transfers]),
        _opt_ints([state.pending[t.id].expires_at for t in pending_transfers]),
        _uuids(failed),
        _names([state.failed[i].name for i in failed]),
        _ints([timestamp] * len(failed)),
    )


def _conforms_to_the_port(ledger: PostgresLedger) -> TransactionalLedger:
    """Never called: mypy checks here that PostgresLedger implements the transactional Ledger port."""
    return ledger
