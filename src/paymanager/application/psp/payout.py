"""The payout job (`psp.payout`, queue `psp.<name>`): one PSP transaction driven to an end.

Write-ahead: the state that says "a call may have gone out" (QUERY_PENDING, CONFIRM_PENDING) is
committed BEFORE the call, so a worker that finds a transaction in it (after a crash, a timeout or
a lost lease) inquires instead of sending again. Every change is a compare-and-set on the row's
(state, version): two claims of one job, or a webhook racing the job, change it once.

COMPLETED posts the payout's hold and FAILED voids it, in the transaction that writes the state and
completes the job: the intent settles exactly once (the settlement row's primary key is the schema's
guarantee). The payouts a worker ends at once share that transaction (`end_payouts` through
`jobs/batch.py`, each job still fenced by its lease): every payout's post credits the one nostro
account, whose row stays locked until the commit, so payouts ending one transaction each would queue
on that lock one commit at a time. The two write-ahead commits (the start's and the transfer's) are
shared the same way by the payouts a worker runs at once (`WriteAheads`): one statement and one
commit per group, each payout's call still made only after its own state is committed.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import NoReturn, TypeVar

import asyncpg

from paymanager.adapters.psp.port import (
    PayoutOrder,
    PspDriver,
    PspError,
    PspRateLimitedError,
    PspUnavailableError,
    TransferResult,
)
from paymanager.application.context import Payments
from paymanager.application.intents import events
from paymanager.application.intents.settle import FinishPlan, finish, finish_many, publish_many
from paymanager.application.intents.store import Intent, IntentStore
from paymanager.application.psp.store import PspStore, PspTx
from paymanager.db.pool import Conn, Pool
from paymanager.domain.channels import PAYOUT_CHANNEL_PSPS
from paymanager.domain.errors import DomainError, PspNotServedError
from paymanager.domain.intents import IntentStatus, transition
from paymanager.domain.psp import PspOutcome, PspState, mask, state_of
from paymanager.jobs import JobContext, PermanentError, RateLimitedError, enqueue
from paymanager.jobs.batch import GroupRunner, SharedTransactions
from paymanager.logging import get_logger
from paymanager.metrics import psp as psp_metrics

log = get_logger("paymanager.psp")

T = TypeVar("T")

PAYOUT_KIND = "psp.payout"
# A payout job is retried by the engine only after an unexpected error or a lost worker; the PSP's
# own faults are counted in psp_tx.attempts and end in MANUAL_REVIEW.
PAYOUT_MAX_ATTEMPTS = 25
PAYOUT_CHANNELS = PAYOUT_CHANNEL_PSPS
# The longest wait between two tries of one step, whatever PSP_MAX_RETRIES.
RETRY_DELAY_MAX_MS = 60_000


def queue_of(psp: str) -> str:
    return f"psp.{psp}"


def payout_unique_key(tx_id: uuid.UUID) -> str:
    return f"psp.payout:{tx_id}"


def beneficiary_of(intent: Intent) -> str:
    """The account the PSP pays: the intent's `metadata.beneficiary_account`, else the payer's own
    account id (a payout to the user's linked bank account)."""
    value = intent.metadata.get("beneficiary_account")
    return str(value)[:64] if value else str(intent.payer_account_id)


def check_psp_served(payments: Payments, channel: str) -> None:
    """Refuse a payout channel whose PSP is not in PSP_NAMES: its payout would wait in a queue no
    psp-worker serves, its funds held, until someone noticed."""
    psp = PAYOUT_CHANNELS.get(channel)
    if psp is not None and psp not in payments.settings.psp_names:
        raise PspNotServedError(
            f"channel {channel} pays out through {psp}, which this deployment does not serve (PSP_NAMES)",
            {"channel": channel, "psp": psp, "served": list(payments.settings.psp_names)},
        )


async def enqueue_payout(payments: Payments, conn: Conn, tx: PspTx) -> bool:
    result = await enqueue(
        conn, PAYOUT_KIND, {"psp_tx_id": str(tx.id)}, queue=queue_of(tx.psp),
        max_attempts=PAYOUT_MAX_ATTEMPTS, unique_key=payout_unique_key(tx.id),
    )  # fmt: skip
    return bool(result.created)


async def start_payout(payments: Payments, conn: Conn, intent: Intent) -> PspTx:
    """Write the payout's PSP transaction (NEW) and its job, on the confirm's own transaction."""
    psp = PAYOUT_CHANNELS[intent.channel]
    tx = await PspStore(conn).insert(
        tx_id=uuid.uuid4(), intent_id=intent.id, psp=psp, amount=intent.amount, currency=intent.currency,
        beneficiary=beneficiary_of(intent), idempotency_key=uuid.uuid4(),
    )  # fmt: skip
    if tx is None:  # written already (a confirm run again by the idempotency layer)
        found = await PspStore(conn).by_intent(intent_id=intent.id)
        assert found is not None
        return found
    await enqueue_payout(payments, conn, tx)
    return tx


@dataclass(frozen=True, slots=True)
class PayoutSettings:
    poll_interval_ms: int
    max_retries: int
    # Shared end transactions: payouts per transaction, transactions at once per PSP and process.
    end_batch_max: int
    end_batches_in_flight: int


@dataclass(frozen=True, slots=True)
class PayoutEnd:
    """A payout's end as its job found it: the terminal state, and the PSP's reference or reason."""

    tx: PspTx
    state: PspState
    reference: str | None
    reason: str | None


Ends = SharedTransactions[PayoutEnd, "events.Event | None"]


def retry_delay_ms(settings: PayoutSettings, attempts: int) -> int:
    return int(min(settings.poll_interval_ms * 2 ** min(attempts, 16), RETRY_DELAY_MAX_MS))


def order_of(tx: PspTx) -> PayoutOrder:
    return PayoutOrder(tx.id, tx.idempotency_key, tx.amount, tx.currency, tx.beneficiary, tx.query_ref)


class WriteAheads:
    """The write-ahead commits of the payouts a worker runs at once: the start (NEW -> QUERY_PENDING,
    before the beneficiary check) and the accepted check (-> CONFIRM_PENDING, before the transfer).

    Each is one statement and one commit per group (`jobs.batch.GroupRunner`: a group starts on the
    loop's next turn, the payouts one claim started join it) instead of one per payout, and each
    caller gets its own row only once the group committed, so the guarantee is the single payout's:
    nothing is sent before its state is committed. The statements lock their rows in id order, as
    every group of payouts does. A group whose statement fails (a row the schema refuses) is run
    again one payout at a time, so that failure stays the one payout's."""

    def __init__(self, pool: Pool, *, batch_max: int, batches_in_flight_max: int) -> None:
        self._pool = pool
        self._starts: GroupRunner[uuid.UUID, PspTx | None] = GroupRunner(
            self._start_group, batch_max=batch_max, batches_in_flight_max=batches_in_flight_max
        )
        self._accepts: GroupRunner[tuple[PspTx, str], PspTx | None] = GroupRunner(
            self._accept_group, batch_max=batch_max, batches_in_flight_max=batches_in_flight_max
        )

    async def start(self, tx_id: uuid.UUID) -> PspTx | None:
        """The transaction, moved from NEW to QUERY_PENDING and committed if it was NEW; None when it
        does not exist."""
        return await self._starts.submit(tx_id)

    async def query_accepted(self, tx: PspTx, query_ref: str) -> PspTx | None:
        """`tx` moved QUERY_PENDING -> QUERIED -> CONFIRM_PENDING and committed; None when it changed."""
        return await self._accepts.submit((tx, query_ref))

    async def _start_group(self, tx_ids: list[uuid.UUID]) -> list[PspTx | Exception | None]:
        try:
            async with self._pool.acquire() as conn:
                found = await PspStore(conn).get_started_many(tx_ids=tx_ids)
        except asyncpg.PostgresError as exc:
            if len(tx_ids) == 1:
                return [exc]
            return [outcome for tx_id in tx_ids for outcome in await self._start_group([tx_id])]
        return [found.get(tx_id) for tx_id in tx_ids]

    async def _accept_group(self, accepted: list[tuple[PspTx, str]]) -> list[PspTx | Exception | None]:
        try:
            async with self._pool.acquire() as conn:
                moved = await PspStore(conn).query_accepted_many(accepted=accepted)
        except asyncpg.PostgresError as exc:
            if len(accepted) == 1:
                return [exc]
            return [outcome for pair in accepted for outcome in await self._accept_group([pair])]
        return list(moved)


class Payout:
    """One run of a payout job: the steps from the state it finds, until an end or a wait."""

    def __init__(
        self, payments: Payments, driver: PspDriver, settings: PayoutSettings, ctx: JobContext, ends: Ends,
        write_aheads: WriteAheads,
    ) -> None:  # fmt: skip
        self.payments = payments
        self.driver = driver
        self.settings = settings
        self.ctx = ctx
        self.ends = ends
        self.write_aheads = write_aheads
        self.tx_id = uuid.UUID(str(ctx.payload["psp_tx_id"]))

    async def run(self) -> None:
        # A NEW transaction comes back QUERY_PENDING, committed before the check below is sent.
        tx = await self._load(start=True)
        while True:
            if tx.state in (PspState.COMPLETED, PspState.FAILED):
                await self._end(tx, tx.state, None, None)
                return
            if tx.state is PspState.MANUAL_REVIEW:
                return
            if tx.state is PspState.NEW:  # moved by a webhook or an operator meanwhile: never expected
                tx = await self._move(tx, PspState.QUERY_PENDING)
            elif tx.state is PspState.QUERY_PENDING:
                # The beneficiary check moves no money: asking again after a crash is safe.
                result = await self._call(tx, "query", self.driver.query(order_of(tx)))
                if not result.accepted:
                    await self._end(tx, PspState.FAILED, None, f"beneficiary refused: {result.reason}")
                    return
                assert result.query_ref is not None, "an accepted beneficiary check has its reference"
                # QUERIED and CONFIRM_PENDING in one commit, before the transfer is sent.
                tx = await self._query_accepted(tx, result.query_ref)
                answer = await self._call(tx, "transfer", self.driver.transfer(order_of(tx)))
                tx = await self._answered(tx, answer)
            elif tx.state is PspState.QUERIED:  # a crash between the two moves of an older release
                tx = await self._move(tx, PspState.CONFIRM_PENDING)
                answer = await self._call(tx, "transfer", self.driver.transfer(order_of(tx)))
                tx = await self._answered(tx, answer)
            else:  # CONFIRM_PENDING found (after a crash or a timeout) or IN_PROGRESS: ask first
                answer = await self._call(tx, "inquire", self.driver.inquire(order_of(tx)))
                if answer.outcome is PspOutcome.NOT_FOUND and self.driver.resends_safely:
                    # The PSP deduplicates by our key: sending the same order again cannot pay twice.
                    answer = await self._call(tx, "transfer", self.driver.transfer(order_of(tx)))
                tx = await self._answered(tx, answer)

    async def _answered(self, tx: PspTx, answer: TransferResult) -> PspTx:
        target = state_of(answer.outcome)
        if target is None:
            # Not found at an IPPS-like PSP: it never got the transfer, or has not yet; it is never
            # sent again, so inquire later and, past the retries, let a person look.
            await self._retry(tx, "the PSP does not know the transfer yet")
        if target is PspState.IN_PROGRESS:
            if tx.state is not PspState.IN_PROGRESS:
                tx = await self._move(tx, PspState.IN_PROGRESS, confirm_ref=answer.reference)
            self.ctx.snooze(self.settings.poll_interval_ms)
        if target is PspState.MANUAL_REVIEW:
            await self._to_review(tx, f"the PSP answered a status paymanager does not know: {answer.reason}")
            return await self._load()
        await self._end(tx, target, answer.reference, answer.reason)
        # The job completed in that transaction: looking at the transaction again would end it again.
        raise _Stop

    async def _call(self, tx: PspTx, operation: psp_metrics.Operation, call: Awaitable[T]) -> T:
        try:
            return await psp_metrics.timed(tx.psp, operation, call)
        except PspRateLimitedError as exc:
            raise RateLimitedError(exc.retry_after_ms, f"{self.driver.name} asked to wait") from exc
        except (PspUnavailableError, PspError) as exc:
            log.warning(
                "PSP call failed", psp=tx.psp, psp_tx_id=str(tx.id), state=tx.state.value, error=str(exc)
            )
            await self._retry(tx, str(exc))

    async def _retry(self, tx: PspTx, error: str) -> NoReturn:
        attempts = tx.attempts + 1
        if attempts > self.settings.max_retries:
            await self._to_review(tx, f"{attempts} tries without an answer; last: {error}", attempts=attempts)
            raise _Stop
        moved = await self._store_move(tx, tx.state, attempts=attempts, last_error=error)
        if moved is None:
            raise _Stop  # someone else (a webhook, an operator) moved it: their change stands
        self.ctx.snooze(retry_delay_ms(self.settings, attempts))

    async def _to_review(self, tx: PspTx, reason: str, *, attempts: int | None = None) -> None:
        moved = await self._store_move(tx, PspState.MANUAL_REVIEW, attempts=attempts, last_error=reason)
        if moved is not None:
            psp_metrics.PAYOUTS.labels(tx.psp, PspState.MANUAL_REVIEW.value).inc()
            log.error("PSP transaction needs manual review", psp=tx.psp, psp_tx_id=str(tx.id),
                      intent_id=str(tx.intent_id), reason=reason)  # fmt: skip

    async def _move(self, tx: PspTx, state: PspState, **fields: str | None) -> PspTx:
        moved = await self._store_move(tx, state, **fields)
        if moved is None:
            raise _Stop
        return moved

    async def _query_accepted(self, tx: PspTx, query_ref: str) -> PspTx:
        moved = await self.write_aheads.query_accepted(tx, query_ref)
        if moved is None:
            raise _Stop
        return moved

    async def _store_move(self, tx: PspTx, state: PspState, **fields: object) -> PspTx | None:
        async with self.payments.pool.acquire() as conn:
            return await PspStore(conn).move(tx=tx, state=state, **fields)  # type: ignore[arg-type]

    async def _load(self, *, start: bool = False) -> PspTx:
        if start:
            tx = await self.write_aheads.start(self.tx_id)
        else:
            async with self.payments.pool.acquire() as conn:
                tx = await PspStore(conn).get(tx_id=self.tx_id)
        if tx is None:
            raise PermanentError(f"PSP transaction {self.tx_id} does not exist")
        return tx

    async def _end(self, tx: PspTx, state: PspState, reference: str | None, reason: str | None) -> None:
        """The terminal state, the intent's settlement and the job's completion, in one transaction
        shared with the other payouts this worker ends at once (their events published after it)."""
        updated = await self.ends.run(self.ctx, PayoutEnd(tx, state, reference, reason))
        if updated is not None:
            # The intent changed: this run ended the payout (a run that finds it ended changes nothing).
            psp_metrics.PAYOUTS.labels(tx.psp, state.value).inc()


class _Stop(Exception):
    """The transaction moved under this run (or went to review): nothing more to do now."""


async def end_payout(
    payments: Payments,
    conn: Conn,
    tx: PspTx,
    state: PspState,
    *,
    reference: str | None,
    reason: str | None,
    resolved_by: str | None = None,
    resolution: str | None = None,
) -> events.Event | None:
    """Move `tx` to COMPLETED or FAILED (when not there yet) and settle its intent, on `conn`; the
    intent's event when it changed. The intent row is locked first, as every settlement does."""
    intent = await IntentStore(conn).get(intent_id=tx.intent_id, lock=True)
    assert intent is not None, "psp_tx references its intent"
    current = await PspStore(conn).get(tx_id=tx.id, lock=True)
    assert current is not None
    if current.state not in (PspState.COMPLETED, PspState.FAILED):
        moved = await PspStore(conn).move(
            tx=current, state=state, confirm_ref=reference, last_error=reason,
            resolved_by=resolved_by, resolution=resolution,
        )  # fmt: skip
        assert moved is not None, "the row lock guarantees the state did not change"
        current = moved
    if intent.status is not IntentStatus.CONFIRMED:
        return None
    if current.state is PspState.COMPLETED:
        updated = await finish(payments, conn, intent, IntentStatus.SETTLED, settled_by=f"psp:{tx.psp}")
        if updated.status is not IntentStatus.SETTLED:
            log.error("the PSP paid out but the ledger had expired the hold; reconcile by hand",
                      psp_tx_id=str(tx.id), intent_id=str(intent.id))  # fmt: skip
    else:
        updated = await finish(
            payments, conn, intent, IntentStatus.FAILED, settled_by=f"psp:{tx.psp}",
            reason=f"the PSP did not pay out: {current.last_error or 'failed'}",
        )  # fmt: skip
    return events.event_payload(updated)


async def end_payouts(
    payments: Payments, conn: Conn, ends: list[PayoutEnd], *, settled_by: str
) -> list[events.Event | Exception | None]:
    """`end_payout` for a group of payouts on `conn`, in a few statements whatever its size; per end
    (in the order given) the intent's event when it changed, None when it had ended already, or the
    exception that payout alone met (nothing of it written: its state moves only once its
    settlement is known to succeed). Locks in the order every settlement takes them: the intents,
    then the PSP transactions, each in id order, then the ledger's accounts (one batch)."""
    intents = {i.id: i for i in await IntentStore(conn).lock_many(intent_ids=[e.tx.intent_id for e in ends])}
    txs = {t.id: t for t in await PspStore(conn).lock_many(tx_ids=[e.tx.id for e in ends])}
    outcomes: list[events.Event | Exception | None] = [None] * len(ends)
    plans: list[tuple[int, FinishPlan]] = []
    planned: set[uuid.UUID] = set()
    for index, end in enumerate(ends):
        current, intent = txs.get(end.tx.id), intents.get(end.tx.intent_id)
        assert current is not None, "the job's PSP transaction exists"
        assert intent is not None, "psp_tx references its intent"
        state = current.state if current.state in (PspState.COMPLETED, PspState.FAILED) else end.state
        if intent.status is not IntentStatus.CONFIRMED or intent.id in planned:
            continue
        planned.add(intent.id)
        target = IntentStatus.SETTLED if state is PspState.COMPLETED else IntentStatus.FAILED
        reason = None if target is IntentStatus.SETTLED else (
            f"the PSP did not pay out: {end.reason or current.last_error or 'failed'}"
        )  # fmt: skip
        try:
            transition(intent.status, target, expires=payments.channels.get(intent.channel).expires)
        except DomainError as exc:  # an unknown channel or a refused transition: this payout's alone
            outcomes[index] = exc
            continue
        plans.append((index, FinishPlan(intent, target, reason)))
    finished = await finish_many(payments, conn, [plan for _, plan in plans], settled_by=settled_by)
    for (index, plan), outcome in zip(plans, finished, strict=True):
        outcomes[index] = outcome
        if isinstance(outcome, Exception):
            continue
        if plan.target is IntentStatus.SETTLED and outcome["status"] != IntentStatus.SETTLED.value:
            log.error("the PSP paid out but the ledger had expired the hold; reconcile by hand",
                      psp_tx_id=str(ends[index].tx.id), intent_id=str(plan.row.id))  # fmt: skip
    to_end: dict[uuid.UUID, tuple[PspTx, PspState, str | None, str | None]] = {}
    for index, end in enumerate(ends):
        current = txs[end.tx.id]
        if isinstance(outcomes[index], Exception) or current.state in (PspState.COMPLETED, PspState.FAILED):
            continue
        to_end.setdefault(current.id, (current, end.state, end.reference, end.reason))
    if to_end:
        moved = await PspStore(conn).end_many(ends=list(to_end.values()))
        assert len(moved) == len(to_end), "the row locks guarantee no state changed"
    return outcomes


def payout_handler(
    payments: Payments, drivers: Mapping[str, PspDriver], settings: PayoutSettings
) -> Callable[[JobContext], Awaitable[None]]:
    def shared(psp: str) -> Ends:
        async def work(
            conn: Conn, items: list[tuple[JobContext, PayoutEnd]]
        ) -> list[events.Event | Exception | None]:
            return await end_payouts(payments, conn, [end for _, end in items], settled_by=f"psp:{psp}")

        async def after_commit(committed: list[events.Event | None]) -> None:
            await publish_many(payments, [event for event in committed if event is not None])

        return SharedTransactions(
            payments.pool, work, batch_max=settings.end_batch_max,
            batches_in_flight_max=settings.end_batches_in_flight, after_commit=after_commit,
        )  # fmt: skip

    ends = {psp: shared(psp) for psp in drivers}
    write_aheads = WriteAheads(
        payments.pool, batch_max=settings.end_batch_max, batches_in_flight_max=settings.end_batches_in_flight
    )

    async def handle(ctx: JobContext) -> None:
        psp = ctx.queue.removeprefix("psp.")
        driver = drivers.get(psp)
        if driver is None:
            raise PermanentError(f"no driver for PSP {psp!r} in this process")
        try:
            await Payout(payments, driver, settings, ctx, ends[psp], write_aheads).run()
        except _Stop:
            return

    return handle


def describe(tx: PspTx) -> str:
    return f"{tx.psp} {tx.id} {tx.state.value} {tx.amount} {tx.currency} to {mask(tx.beneficiary)}"
