"""Every use of the ledger by payments: accounts, and the hold / post / void of an intent's funds.

An intent's funds are held by one or two linked pending transfers: payer -> payee for the amount and
payer -> fees for the fee. Their ids derive from the intent's `hold_id`, chosen at confirm, and the
post/void ids derive from the hold ids, so a retried settlement submits the same ids and the ledger
answers `exists` (or `pending_transfer_already_posted`) instead of moving money twice.
"""

from __future__ import annotations

import dataclasses
import itertools
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeGuard

from paymanager.application.ids import new_id, transfer_id
from paymanager.application.intents.store import Intent
from paymanager.db.pool import Conn
from paymanager.domain.capture import Capture
from paymanager.domain.channels import AccountKind, ChannelName
from paymanager.domain.errors import InsufficientFundsError
from paymanager.domain.money import currency
from paymanager.jobs import JobContext
from paymanager.ledger import (
    AMOUNT_MAX,
    BATCH_MAX,
    Account,
    AccountFlags,
    CreateTransferResult,
    Ledger,
    PostgresLedger,
    TransactionalLedger,
    Transfer,
    TransferEventResult,
    TransferFlags,
    account_id_for,
    ensure_accounts,
)

ACCOUNT_CODES = {AccountKind.USER: 1, AccountKind.MERCHANT: 2, AccountKind.SYSTEM: 10}
# Transfer codes say why money moved; the fee leg has its own code on every channel.
TRANSFER_CODES = {
    ChannelName.INTERNAL_P2P: 1,
    ChannelName.IPPS_TRANSFER: 2,
    ChannelName.SERVICE_TRANSFER: 3,
    ChannelName.ADMIN_TRANSFER: 4,
    ChannelName.MERCHANT_INVOICE: 5,
    ChannelName.QP_TRANSFER: 6,
    ChannelName.WISE_TRANSFER: 7,
}
FEE_TRANSFER_CODE = 100
# A refund's legs: the amount back from the payee, the fee back from the fee account.
REFUND_TRANSFER_CODE = 200
REFUND_FEE_TRANSFER_CODE = 201

# Results that mean "this hold is already resolved the way we wanted" when retried.
_POSTED = {CreateTransferResult.pending_transfer_already_posted}
_VOIDED = {
    CreateTransferResult.pending_transfer_already_voided,
    CreateTransferResult.pending_transfer_expired,
}


class LedgerRefusedError(RuntimeError):
    """The ledger refused a transfer for a reason that is a bug or a broken invariant, not the client's."""


class HoldIdBurnedError(LedgerRefusedError):
    """The hold's id failed before (TigerBeetle's `id_already_failed`): the hold needs a new id."""


def joins_transactions(ledger: Ledger) -> TypeGuard[TransactionalLedger]:
    """True when the ledger's batches can join the caller's PostgreSQL transaction (PostgreSQL);
    TigerBeetle cannot, and payments follow the decide-then-apply protocol there (holds/resolve.py)."""
    return isinstance(ledger, PostgresLedger)


async def _transfers(
    ledger: Ledger, conn: Conn | None, transfers: Sequence[Transfer], *, savepoint: bool = True
) -> list[TransferEventResult]:
    """The batch on `conn`'s transaction where the ledger can join it, else on the ledger alone."""
    if conn is not None and joins_transactions(ledger):
        return await ledger.create_transfers(transfers, conn=conn, savepoint=savepoint)
    return await ledger.create_transfers(transfers)


def new_account_id() -> uuid.UUID:
    return new_id()


def system_account_id(name: str) -> uuid.UUID:
    """The ledger's id of a system account name (the same in every process), as our row id."""
    return uuid.UUID(int=account_id_for(name))


async def open_account(
    ledger: Ledger, conn: Conn, account_id: uuid.UUID, code: str, kind: AccountKind
) -> None:
    """A customer account may never go below zero: pending debits count against it."""
    account = Account(
        id=account_id.int,
        ledger=currency(code).numeric,
        code=ACCOUNT_CODES[kind],
        flags=AccountFlags.DEBITS_MUST_NOT_EXCEED_CREDITS,
    )
    await _create_accounts(ledger, conn, [account])


async def ensure_system_accounts(ledger: Ledger, ids_by_currency: list[tuple[uuid.UUID, str]]) -> None:
    """Create the missing system accounts and verify the others (ledger, code, flags) match.

    System accounts have no limit: funding goes negative as money enters the platform.
    """
    accounts = [
        Account(id=account_id.int, ledger=currency(code).numeric, code=ACCOUNT_CODES[AccountKind.SYSTEM])
        for account_id, code in ids_by_currency
    ]
    await ensure_accounts(ledger, accounts)


async def _create_accounts(ledger: Ledger, conn: Conn, accounts: list[Account]) -> None:
    # On TigerBeetle the account is created before the caller commits its row: a rollback leaves an
    # account no row names, with no money and no use (its id is random).
    if joins_transactions(ledger):
        results = await ledger.create_accounts(accounts, conn=conn)
    else:
        results = await ledger.create_accounts(accounts)
    bad = [r for r in results if not r.ok]
    if bad:
        raise LedgerRefusedError(f"the ledger refused accounts: {[r.result.name for r in bad]}")


async def balance(ledger: Ledger, account_id: uuid.UUID) -> dict[str, int]:
    figures = await ledger.balance(account_id.int)
    return {"posted": figures.posted, "pending": figures.pending, "available": figures.available}


def _legs(intent: Intent) -> list[tuple[str, int, int, int]]:
    """(purpose, debit account, credit account, amount) of each hold leg of `intent`."""
    legs = [("amount", intent.payer_account_id.int, intent.payee_account_id.int, intent.amount)]
    if intent.fee > 0:
        assert intent.fee_account_id is not None, "an intent with a fee names its fee account"
        legs.append(("fee", intent.payer_account_id.int, intent.fee_account_id.int, intent.fee))
    return legs


def _code(intent: Intent, purpose: str) -> int:
    return FEE_TRANSFER_CODE if purpose == "fee" else TRANSFER_CODES[ChannelName(intent.channel)]


async def hold(
    ledger: Ledger,
    conn: Conn,
    intent: Intent,
    hold_id: uuid.UUID,
    timeout_sec: int,
    *,
    savepoint: bool = True,
) -> None:
    """Hold the intent's amount and fee with linked pending transfers, or raise `InsufficientFundsError`.

    `savepoint=False`: see `PostgresLedger.create_transfers` (the caller runs its transaction again on
    `LedgerConflictError`)."""
    legs = _legs(intent)
    transfers = [
        Transfer(
            id=transfer_id(hold_id, f"hold.{purpose}"),
            debit_account_id=debit,
            credit_account_id=credit,
            amount=amount,
            user_data_128=intent.id.int,
            timeout=timeout_sec,
            ledger=currency(intent.currency).numeric,
            code=_code(intent, purpose),
            flags=TransferFlags.PENDING | (TransferFlags.LINKED if index < len(legs) - 1 else 0),
        )
        for index, (purpose, debit, credit, amount) in enumerate(legs)
    ]
    results = await _transfers(ledger, conn, transfers, savepoint=savepoint)
    if all(r.ok for r in results):
        return
    reasons = {r.result for r in results} - {CreateTransferResult.linked_event_failed}
    if reasons == {CreateTransferResult.exists}:
        # The same hold again (a confirm retried after a crash on TigerBeetle): a repeated linked
        # chain answers `exists` for its first event and fails the rest, all of which exist.
        return
    if reasons == {CreateTransferResult.id_already_failed}:
        raise HoldIdBurnedError(f"the hold id of intent {intent.id} failed before")
    if CreateTransferResult.exceeds_credits in reasons:
        raise InsufficientFundsError(
            "the payer's available balance does not cover the amount and fee",
            {"account_id": str(intent.payer_account_id), "needed": intent.amount + intent.fee},
        )
    raise LedgerRefusedError(
        f"the ledger refused the hold of intent {intent.id}: {sorted(r.name for r in reasons)}"
    )


async def resolve(ledger: Ledger, conn: Conn | None, intent: Intent, *, post: bool) -> bool:
    """Post (`post=True`) or void the intent's holds. Returns False when a post found them voided or
    expired (the funds are released, so the intent must fail); True otherwise. Idempotent."""
    outcome = (await resolve_many(ledger, conn, [(intent, post)]))[0]
    if isinstance(outcome, LedgerRefusedError):
        raise outcome
    return outcome


async def resolve_many(
    ledger: Ledger,
    conn: Conn | None,
    intents: list[tuple[Intent, bool]],
    captures: Sequence[Capture | None] | None = None,
) -> list[bool | LedgerRefusedError]:
    """`resolve` for several intents in ONE ledger batch (on `conn`'s transaction where the ledger
    joins it): per (intent, post) pair, its
    outcome as `resolve` returns it, or the `LedgerRefusedError` it would raise. `captures` (per
    pair, None for the whole hold) makes a post partial: the captured amount and fee are posted and
    the rest of each leg released (the ledger's partial post).

    Each intent's legs form their own linked chain (the last leg is unlinked), so the ledger applies
    or refuses each intent's chain as a whole and independently of the others: a refused intent has
    moved nothing, and the others' transfers stand."""
    transfers: list[Transfer] = []
    ends: list[int] = []
    for index, (intent, post) in enumerate(intents):
        capture = captures[index] if captures is not None else None
        transfers.extend(_resolve_transfers(intent, post=post, capture=capture))
        ends.append(len(transfers))
    results = await _transfers(ledger, conn, transfers) if transfers else []
    outcomes: list[bool | LedgerRefusedError] = []
    start = 0
    for (intent, post), end in zip(intents, ends, strict=True):
        outcomes.append(_resolve_outcome(intent, results[start:end], post=post))
        start = end
    return outcomes


def _resolve_transfers(intent: Intent, *, post: bool, capture: Capture | None = None) -> list[Transfer]:
    hold_id = intent.hold_id
    assert hold_id is not None, "a confirmed intent has its hold"
    assert capture is None or post, "only a post captures"
    legs = _legs(intent)
    action = "post" if post else "void"
    flag = TransferFlags.POST_PENDING_TRANSFER if post else TransferFlags.VOID_PENDING_TRANSFER
    posted = {"amount": capture.amount, "fee": capture.fee} if capture is not None else {}
    return [
        Transfer(
            id=transfer_id(hold_id, f"{action}.{purpose}"),
            pending_id=transfer_id(hold_id, f"hold.{purpose}"),
            amount=posted.get(purpose, AMOUNT_MAX if post else 0),
            user_data_128=intent.id.int,
            ledger=currency(intent.currency).numeric,
            code=_code(intent, purpose),
            flags=flag | (TransferFlags.LINKED if index < len(legs) - 1 else 0),
        )
        for index, (purpose, _, _, _) in enumerate(legs)
    ]


def _resolve_outcome(
    intent: Intent, results: list[TransferEventResult], *, post: bool
) -> bool | LedgerRefusedError:
    done = _POSTED if post else _VOIDED
    released = _VOIDED if post else set()
    outcome = True
    for result in results:
        if result.ok or result.result in done or result.result is CreateTransferResult.linked_event_failed:
            continue
        if result.result in released:
            outcome = False
            continue
        action = "post" if post else "void"
        return LedgerRefusedError(f"the ledger refused to {action} intent {intent.id}: {result.result.name}")
    return outcome


# A void of a hold a lost confirm may have left: the hold was never made (not found), its id burned
# (the hold was refused), or it is already voided or expired; all mean nothing is held any more.
_RELEASED = _VOIDED | {
    CreateTransferResult.pending_transfer_not_found,
    CreateTransferResult.id_already_failed,
    CreateTransferResult.linked_event_failed,
}
# Intents per ledger batch of `release_unconfirmed_holds` (at most two legs each).
_RELEASE_CHUNK = BATCH_MAX // 2


async def release_unconfirmed_hold(ledger: Ledger, intent: Intent, hold_id: uuid.UUID) -> None:
    """Void the holds `hold_id` names, which a lost confirm of `intent` may have left on a ledger that
    cannot join transactions; a hold that does not exist is nothing to do."""
    await release_unconfirmed_holds(ledger, [(intent, hold_id)])


async def release_unconfirmed_holds(ledger: Ledger, held: Sequence[tuple[Intent, uuid.UUID]]) -> None:
    """`release_unconfirmed_hold` for many intents, in as few ledger batches as fit. The void ids
    derive from the hold ids, so a release retried after a crash is answered `exists`."""
    for start in range(0, len(held), _RELEASE_CHUNK):
        chunk = held[start : start + _RELEASE_CHUNK]
        voids = [
            (intent.id, void)
            for intent, hold_id in chunk
            for void in _resolve_transfers(dataclasses.replace(intent, hold_id=hold_id), post=False)
        ]
        results = await ledger.create_transfers([void for _, void in voids])
        refused = sorted(
            {
                (str(intent_id), r.result.name)
                for (intent_id, _), r in zip(voids, results, strict=True)
                if not r.ok and r.result not in _RELEASED
            }
        )
        if refused:
            raise LedgerRefusedError(f"the ledger refused to release unconfirmed holds: {refused}")


async def refund(
    ledger: Ledger, conn: Conn, intent: Intent, refund_id: uuid.UUID, amount: int, fee: int
) -> bool:
    """Move a refund back to the payer with posted linked transfers (payee -> payer for `amount`,
    fee account -> payer for `fee`), ids derived from the refund's id so a retried job is answered
    `exists`. Returns False when the payee's balance does not cover it (the refund fails)."""
    legs = [("amount", intent.payee_account_id.int, amount, REFUND_TRANSFER_CODE)]
    if fee > 0:
        assert intent.fee_account_id is not None, "a refunded fee comes from the intent's fee account"
        legs.append(("fee", intent.fee_account_id.int, fee, REFUND_FEE_TRANSFER_CODE))
    transfers = [
        Transfer(
            id=transfer_id(refund_id, f"refund.{purpose}"),
            debit_account_id=debit,
            credit_account_id=intent.payer_account_id.int,
            amount=value,
            user_data_128=intent.id.int,
            user_data_64=0,
            ledger=currency(intent.currency).numeric,
            code=code,
            flags=TransferFlags.LINKED if index < len(legs) - 1 else 0,
        )
        for index, (purpose, debit, value, code) in enumerate(legs)
    ]
    # On TigerBeetle the transfers cannot join `conn`'s transaction; their ids are the refund's, so a
    # job retried after a crash between the ledger's answer and the commit is answered `exists`, or
    # `id_already_failed` where the first try was refused.
    results = await _transfers(ledger, conn, transfers)
    reasons = {r.result for r in results if not r.ok} - {
        CreateTransferResult.linked_event_failed,
        CreateTransferResult.exists,
    }
    if not reasons:
        return True
    if reasons <= {CreateTransferResult.exceeds_credits, CreateTransferResult.id_already_failed}:
        return False
    raise LedgerRefusedError(f"the ledger refused refund {refund_id}: {sorted(r.name for r in reasons)}")


EXPIRE_KIND = "ledger.expire_pending"
EXPIRE_BATCH = 1_000


def expire_pending_handler(ledger: Ledger) -> Callable[[JobContext], Awaitable[None]]:
    """The periodic job that releases holds past their ledger timeout (a backstop: paymanager voids
    its own holds by their settlement deadline, an hour before the ledger would)."""

    async def handle(ctx: JobContext) -> None:
        del ctx
        await ledger.expire_pending(limit=EXPIRE_BATCH)

    return handle


SESSION_TRANSFER_CODE = 6


@dataclasses.dataclass(frozen=True, slots=True)
class SessionSettlement:
    """What the ledger records of one completed checkout session."""

    session_id: uuid.UUID
    currency_code: str
    source_account_id: uuid.UUID
    merchant_account_id: uuid.UUID
    fee_account_id: uuid.UUID
    amount: int
    fee: int

    def transfers(self) -> list[Transfer]:
        """The amount entered the platform from the providers; the merchant is credited the amount
        less the fee, the fee account the fee, in one linked chain.

        The ids derive from the session, so a transaction run again submits the same ids and the
        ledger answers `exists`. The source is the funding account (money entering the platform); a
        clearing account per provider can take its place once the providers' settlements are
        reconciled."""
        parts = [("merchant", self.merchant_account_id, self.amount - self.fee, SESSION_TRANSFER_CODE)]
        if self.fee > 0:
            parts.append(("fee", self.fee_account_id, self.fee, FEE_TRANSFER_CODE))
        parts = [part for part in parts if part[2] > 0]
        return [
            Transfer(
                id=transfer_id(self.session_id, f"session.{purpose}"),
                debit_account_id=self.source_account_id.int,
                credit_account_id=credit.int,
                amount=value,
                user_data_128=self.session_id.int,
                ledger=currency(self.currency_code).numeric,
                code=code,
                flags=TransferFlags.LINKED if index < len(parts) - 1 else 0,
            )
            for index, (purpose, credit, value, code) in enumerate(parts)
        ]


async def record_session_settlements(
    ledger: Ledger, conn: Conn, settlements: Sequence[SessionSettlement]
) -> list[LedgerRefusedError | None]:
    """The settlements of a group of completed sessions in ONE ledger batch (each its own linked
    chain); per settlement None, or the error of its chain, which the ledger refused whole (nothing
    of it written; the others are)."""
    chains = [settlement.transfers() for settlement in settlements]
    transfers = [transfer for chain in chains for transfer in chain]
    assert len(transfers) <= BATCH_MAX, "a group of completions fits one ledger batch"
    # Deterministic ids: on TigerBeetle (which cannot join `conn`) a rerun is answered `exists`.
    results = iter(await _transfers(ledger, conn, transfers) if transfers else [])
    outcomes: list[LedgerRefusedError | None] = []
    for settlement, chain in zip(settlements, chains, strict=True):
        bad = sorted(r.result.name for r in itertools.islice(results, len(chain)) if not r.ok)
        outcomes.append(
            LedgerRefusedError(f"the ledger refused the settlement of session {settlement.session_id}: {bad}")
            if bad
            else None
        )
    return outcomes
