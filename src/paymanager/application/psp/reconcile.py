"""The PSP part of the start-up reconciler: no payout is left without a way forward.

A confirmed payout without a PSP transaction (confirmed by a release before PSP payouts) gets one;
an open transaction whose job is gone gets its job again (the unique key makes that once however
many processes reconcile at once); a transaction that ended while its intent is still confirmed is
settled. Payouts are never failed for their settlement deadline: only the PSP (or an operator) knows
whether the money left.
"""

from __future__ import annotations

from dataclasses import dataclass

from paymanager.application.context import Payments
from paymanager.application.intents.settle import publish
from paymanager.application.intents.store import IntentStore
from paymanager.application.psp.payout import end_payout, enqueue_payout, start_payout
from paymanager.application.psp.store import PspStore, PspTx
from paymanager.domain.intents import IntentStatus
from paymanager.logging import get_logger

log = get_logger("paymanager.reconciler")


@dataclass
class PspReconcileReport:
    started: int = 0
    reenqueued: int = 0
    settled: int = 0


async def reconcile_payouts(payments: Payments, *, batch_size: int) -> PspReconcileReport:
    report = PspReconcileReport()
    async with payments.pool.acquire() as conn, conn.transaction():
        for intent_id in await PspStore(conn).payout_intents_without_tx(limit=batch_size):
            intent = await IntentStore(conn).get(intent_id=intent_id, lock=True)
            if intent is not None and intent.status is IntentStatus.CONFIRMED:
                await start_payout(payments, conn, intent)
                report.started += 1
        for tx in await PspStore(conn).open_without_job(limit=batch_size):
            if await enqueue_payout(payments, conn, tx):
                report.reenqueued += 1
                log.warning("re-enqueued the job of an open PSP transaction", psp_tx_id=str(tx.id))
    for tx in await _terminal_unsettled(payments, batch_size):
        async with payments.pool.acquire() as conn, conn.transaction():
            event = await end_payout(payments, conn, tx, tx.state, reference=None, reason=tx.last_error)
        if event is not None:
            report.settled += 1
            await publish(payments, event)
    if report.started or report.reenqueued or report.settled:
        log.info("reconciled PSP payouts", started=report.started, reenqueued=report.reenqueued,
                 settled=report.settled)  # fmt: skip
    return report


async def _terminal_unsettled(payments: Payments, limit: int) -> list[PspTx]:
    async with payments.pool.acquire() as conn:
        return await PspStore(conn).terminal_unsettled(limit=limit)
