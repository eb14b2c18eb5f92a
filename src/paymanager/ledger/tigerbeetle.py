"""The TigerBeetle adapter: the `Ledger` port on the official client (`paymanager[tigerbeetle]`, 0.17).

Our types mirror TigerBeetle's field for field and our result enums carry its status codes as
values, so the adapter is a translation of shapes. The client is imported only when a server
answers, so this module loads without the extra installed.

Connecting follows the source system (`connectTb`): 5 tries, waiting 2000 ms x try between them
(linear, although the source calls it exponential). The client itself retries requests forever and
has no timeout, so reachability is probed with a TCP connection to the replicas first, and `ping`
bounds its wait with a timeout.

The client cannot withdraw a request it has submitted, and a request whose coroutine is cancelled
stays registered in it, so that the client's `close()` then fails an assertion. The adapter
therefore never cancels a request: each runs as a task of its own, which a timeout or a caller
giving up stops waiting for, and which ends when the server answers or `close()` ends it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from types import ModuleType
from typing import Any

from paymanager import tracing
from paymanager.ledger.port import Ledger, check_history_limit
from paymanager.ledger.types import (
    BATCH_MAX,
    Account,
    AccountEventResult,
    AccountNotFoundError,
    Balance,
    BatchTooLargeError,
    CreateAccountResult,
    CreateTransferResult,
    LedgerError,
    LedgerUnavailableError,
    Normal,
    Transfer,
    TransferEventResult,
    balance_of,
    validate_account,
    validate_transfer,
)
from paymanager.logging import get_logger

log = get_logger("paymanager.ledger")

CONNECT_ATTEMPTS = 5
CONNECT_BACKOFF_MS = 2000
PROBE_TIMEOUT_S = 2.0
PING_TIMEOUT_S = 5.0
TB_DEFAULT_PORT = 3001


def replica_endpoints(addresses: str) -> list[tuple[str, int]]:
    """TigerBeetle's address syntax: "3000" is 127.0.0.1:3000, "host" is host:3001, "host:port"."""
    endpoints = []
    for item in addresses.split(","):
        text = item.strip()
        if not text:
            continue
        if text.isdigit():
            endpoints.append(("127.0.0.1", int(text)))
            continue
        host, sep, port = text.rpartition(":")
        endpoints.append((host, int(port)) if sep and port.isdigit() else (text, TB_DEFAULT_PORT))
    if not endpoints:
        raise ValueError(f"no TigerBeetle replica address in {addresses!r}")
    return endpoints


async def _probe(endpoints: list[tuple[str, int]]) -> str | None:
    """None when a replica accepts a TCP connection, else why none did."""
    problems = []
    for host, port in endpoints:
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), PROBE_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            problems.append(f"{host}:{port}: {exc or type(exc).__name__}")
            continue
        writer.close()
        return None
    return "; ".join(problems)


class TigerBeetleLedger:
    """The `Ledger` port on a TigerBeetle cluster."""

    def __init__(self, client: Any, *, ping_timeout_s: float = PING_TIMEOUT_S) -> None:
        self._client = client
        self._ping_timeout_s = ping_timeout_s
        self._requests: set[asyncio.Task[Any]] = set()  # submitted, not yet answered
        self._ping: asyncio.Task[Any] | None = None
        import tigerbeetle as tb

        self._tb = tb

    @classmethod
    async def connect(
        cls,
        addresses: str,
        *,
        cluster_id: int = 0,
        attempts: int = CONNECT_ATTEMPTS,
        backoff_ms: int = CONNECT_BACKOFF_MS,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> TigerBeetleLedger:
        """Connect, trying `attempts` times and waiting `backoff_ms` x try between tries.

        Raises `LedgerUnavailableError` when no try reached a replica (the runtime then exits 1).
        """
        assert attempts >= 1, attempts
        endpoints = replica_endpoints(addresses)
        for attempt in range(1, attempts + 1):
            problem = await _probe(endpoints)
            if problem is None:
                import tigerbeetle as tb

                return cls(tb.ClientAsync(cluster_id=cluster_id, replica_addresses=addresses))
            log.warning("tigerbeetle not reachable", attempt=attempt, attempts=attempts, error=problem)
            if attempt < attempts:
                await sleep(backoff_ms * attempt / 1000)
        raise LedgerUnavailableError(
            f"TigerBeetle at {addresses} did not answer after {attempts} tries: {problem}"
        )

    # --- writes --------------------------------------------------------------------------------

    async def create_accounts(self, accounts: Sequence[Account]) -> list[AccountEventResult]:
        _check_batch(len(accounts))
        for account in accounts:
            validate_account(account)
        if not accounts:
            return []
        events = [_to_tb_account(self._tb, a) for a in accounts]
        if tracing.enabled():
            with tracing.span(
                "ledger.create_accounts", {"ledger.backend": "tigerbeetle", "ledger.events": len(events)}
            ):
                results = await self._split_when_too_large(self._client.create_accounts, events)
        else:
            results = await self._split_when_too_large(self._client.create_accounts, events)
        return [_from_tb_account_result(r) for r in results]

    async def create_transfers(self, transfers: Sequence[Transfer]) -> list[TransferEventResult]:
        _check_batch(len(transfers))
        for transfer in transfers:
            validate_transfer(transfer)
        if not transfers:
            return []
        events = [_to_tb_transfer(self._tb, t) for t in transfers]
        if tracing.enabled():
            with tracing.span(
                "ledger.create_transfers", {"ledger.backend": "tigerbeetle", "ledger.events": len(events)}
            ):
                results = await self._split_when_too_large(self._client.create_transfers, events)
        else:
            results = await self._split_when_too_large(self._client.create_transfers, events)
        return [_from_tb_transfer_result(r) for r in results]

    async def expire_pending(self, now: int | None = None, *, limit: int = 1000) -> int:
        """TigerBeetle expires pending transfers by itself, on its own clock."""
        del now, limit
        return 0

    # --- reads ---------------------------------------------------------------------------------

    async def lookup_accounts(self, ids: Sequence[int]) -> list[Account]:
        _check_batch(len(ids))
        accounts = await self._split_when_too_large(self._client.lookup_accounts, list(ids))
        found = {a.id: _from_tb_account(a) for a in accounts}
        return [found[i] for i in ids if i in found]

    async def lookup_transfers(self, ids: Sequence[int]) -> list[Transfer]:
        _check_batch(len(ids))
        transfers = await self._split_when_too_large(self._client.lookup_transfers, list(ids))
        found = {t.id: _from_tb_transfer(t) for t in transfers}
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
        query = _account_filter(
            self._tb, account_id, timestamp_min=timestamp_min, timestamp_max=timestamp_max, code=code,
            limit=limit, reversed=reversed,
        )  # fmt: skip
        return [_from_tb_transfer(t) for t in await self._request(self._client.get_account_transfers(query))]

    async def balance(self, account_id: int, normal: Normal | None = None) -> Balance:
        found = await self.lookup_accounts([account_id])
        if not found:
            raise AccountNotFoundError(account_id)
        return balance_of(found[0], normal)

    async def ping(self) -> None:
        # At most one ping in flight: probes repeated through an outage wait for the same lookup
        # rather than queue one more each in the client, which would send them all on recovery.
        if self._ping is None or self._ping.done():
            self._ping = self._submit(self._client.lookup_accounts([1]))
        try:
            await asyncio.wait_for(asyncio.shield(self._ping), self._ping_timeout_s)
        except TimeoutError as exc:
            raise LedgerUnavailableError(
                f"TigerBeetle did not answer within {self._ping_timeout_s} s"
            ) from exc

    async def close(self) -> None:
        # The client ends what is still in flight with ClientClosedError; collect those outcomes
        # so that none is reported as an exception never retrieved.
        await self._client.close()
        await asyncio.gather(*self._requests, return_exceptions=True)

    # --- requests ------------------------------------------------------------------------------

    async def _split_when_too_large(
        self, call: Callable[[list[Any]], Coroutine[Any, Any, list[Any]]], events: list[Any]
    ) -> list[Any]:
        """`call(events)`; when the cluster refuses the request as too large (a replica's
        `--limit-request` below a full batch: a `--development` replica takes 253 events), the batch
        is halved, at a linked chain's end, and each half sent in turn. Results keep the events'
        order. A chain is never split (it must be applied whole): one the cluster cannot take in
        one request fails as too large. Halves go one after another, so a batch's events are
        applied in order, as in one request; only linked chains were ever atomic."""
        try:
            return list(await self._request(call(events)))
        except _RequestTooLargeError:
            cut = _chain_boundary_near_middle(events)
            if cut is None:
                raise LedgerError(
                    f"a linked chain of {len(events)} events is larger than the TigerBeetle cluster "
                    "accepts in one request"
                ) from None
        first = await self._split_when_too_large(call, events[:cut])
        return first + await self._split_when_too_large(call, events[cut:])

    def _submit(self, call: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.create_task(call)
        self._requests.add(task)  # also the strong reference a running task needs
        task.add_done_callback(self._requests.discard)
        return task

    async def _request(self, call: Coroutine[Any, Any, Any]) -> Any:
        """The call's result; cancelling the caller stops the wait, never the request (see above).

        The client's own failures leave as the port's errors: a closed or evicted client session
        can no longer reach the cluster (`LedgerUnavailableError`; an evicted session must be
        replaced by a new client), and a request the cluster's message size cannot hold is the
        caller's batch being too large for this cluster (`LedgerError`).
        """
        try:
            return await asyncio.shield(self._submit(call))
        except (self._tb.ClientClosedError, self._tb.ClientEvictedError) as exc:
            raise LedgerUnavailableError(f"TigerBeetle client unusable: {type(exc).__name__}") from exc
        except self._tb.TooMuchDataError as exc:
            raise _RequestTooLargeError(str(exc)) from exc


class _RequestTooLargeError(LedgerError):
    """The cluster's message size cannot hold the request (split by `_split_when_too_large`)."""


def _chain_boundary_near_middle(events: list[Any]) -> int | None:
    """An index 0 < i < len(events) where no linked chain is open (events[i - 1] not linked),
    nearest the middle; None when there is none (one chain, or one event)."""
    ends = [i + 1 for i, e in enumerate(events[:-1]) if not _is_linked(e)]
    if not ends:
        return None
    middle = len(events) // 2
    return min(ends, key=lambda i: abs(i - middle))


def _is_linked(event: Any) -> bool:
    # Accounts and transfers carry the `linked` flag in bit 0; ids (lookups) are never linked.
    flags = getattr(event, "flags", 0)
    return bool(int(flags) & 1)


# --- translation -------------------------------------------------------------------------------
# Module functions taking the client module `tb`, so tests/unit/ledger/test_tigerbeetle_mapping.py
# checks them against the installed client without a server.


def _to_tb_account(tb: ModuleType, a: Account) -> Any:
    return tb.Account(
        a.id, a.debits_pending, a.debits_posted, a.credits_pending, a.credits_posted, a.user_data_128,
        a.user_data_64, a.user_data_32, a.ledger, a.code, _flags(tb.AccountFlags, a.flags), a.timestamp,
    )  # fmt: skip


def _to_tb_transfer(tb: ModuleType, t: Transfer) -> Any:
    # Positional, in the client's field order (the mapping tests round-trip every field with
    # distinct values, so a reordered client fails there): keywords cost more than the rest of the
    # translation on a full batch.
    return tb.Transfer(
        t.id, t.debit_account_id, t.credit_account_id, t.amount, t.pending_id, t.user_data_128,
        t.user_data_64, t.user_data_32, t.timeout, t.ledger, t.code, _flags(tb.TransferFlags, t.flags),
        t.timestamp,
    )  # fmt: skip


# Constructing an IntFlag member from an int walks its members on every call, which costs more
# than building the whole event; the combinations in use are few, so each is made once.
_FLAG_MEMBERS: dict[tuple[type, int], Any] = {}


def _flags(kind: type, value: int) -> Any:
    member = _FLAG_MEMBERS.get((kind, value))
    if member is None:
        member = _FLAG_MEMBERS[(kind, value)] = kind(value)
    return member


def _account_filter(
    tb: ModuleType, account_id: int, *, timestamp_min: int, timestamp_max: int, code: int, limit: int,
    reversed: bool,
) -> Any:  # fmt: skip
    """An account's transfers on both sides, as `Ledger.get_account_transfers` asks for them."""
    flags = tb.AccountFilterFlags.DEBITS | tb.AccountFilterFlags.CREDITS
    if reversed:
        flags |= tb.AccountFilterFlags.REVERSED
    return tb.AccountFilter(
        account_id=account_id, user_data_128=0, user_data_64=0, user_data_32=0, code=code,
        timestamp_min=timestamp_min, timestamp_max=timestamp_max, limit=limit, flags=flags,
    )  # fmt: skip


def _from_tb_account_result(r: Any) -> AccountEventResult:
    # Our result codes carry TigerBeetle's wire values, so a status maps by value (through the
    # enum's own value map: calling the enum per result costs several times more).
    return AccountEventResult(r.timestamp, _ACCOUNT_RESULTS[int(r.status)])


def _from_tb_transfer_result(r: Any) -> TransferEventResult:
    return TransferEventResult(r.timestamp, _TRANSFER_RESULTS[int(r.status)])


_ACCOUNT_RESULTS: dict[int, CreateAccountResult] = {int(c.value): c for c in CreateAccountResult}
_TRANSFER_RESULTS: dict[int, CreateTransferResult] = {int(c.value): c for c in CreateTransferResult}


def _from_tb_account(a: Any) -> Account:
    return Account(
        a.id, a.debits_pending, a.debits_posted, a.credits_pending, a.credits_posted, a.user_data_128,
        a.user_data_64, a.user_data_32, a.ledger, a.code, int(a.flags), a.timestamp,
    )  # fmt: skip


def _from_tb_transfer(t: Any) -> Transfer:
    return Transfer(
        t.id, t.debit_account_id, t.credit_account_id, t.amount, t.pending_id, t.user_data_128,
        t.user_data_64, t.user_data_32, t.timeout, t.ledger, t.code, int(t.flags), t.timestamp,
    )  # fmt: skip


def _check_batch(size: int) -> None:
    if size > BATCH_MAX:
        raise BatchTooLargeError(size, BATCH_MAX)


def _conforms_to_the_port(ledger: TigerBeetleLedger) -> Ledger:
    """Never called: mypy checks here that TigerBeetleLedger implements the Ledger port."""
    return ledger
