"""The invoice expiry sweep of the `invoice-expiry` role (which also expires uncaptured holds).

A periodic job (one per `INVOICE_EXPIRY_SWEEP_INTERVAL_MS` slot cluster-wide, however many processes
run the role) expires merchant invoices left `created` past `expires_at`: one atomic UPDATE of up to
`INVOICE_EXPIRY_BATCH_SIZE` rows per transaction, with SKIP LOCKED so that a sweep and a confirm (or
two sweeps) never expire an invoice twice. Each expiry is published as `intent.{id}`. The same sweep
expires manual intents left uncaptured past their capture deadline, voiding their holds
(`reconcile.expire_due_captures`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from paymanager.application.context import Payments
from paymanager.application.intents.reconcile import (
    ReconcileReport,
    expire_due_captures,
    expire_due_invoices,
)
from paymanager.jobs import JobContext

SWEEP_KIND = "invoice.expire_sweep"
INVOICE_QUEUE = "invoice-expiry"
# A sweep stops after this many batches and leaves the rest to the next slot, so one run is bounded.
MAX_BATCHES_PER_SWEEP = 100


async def sweep_invoices(payments: Payments) -> int:
    """Expire due invoices in bounded batches; returns how many expired."""
    return (await sweep(payments)).expired


async def sweep(payments: Payments) -> ReconcileReport:
    """Expire due invoices, then uncaptured holds past their deadline, each in bounded batches."""
    batch = payments.settings.invoice_expiry_batch_size
    report = ReconcileReport()
    most = batch * MAX_BATCHES_PER_SWEEP
    await expire_due_invoices(payments, batch_size=batch, max_intents=most, report=report)
    await expire_due_captures(payments, batch_size=batch, max_intents=most, report=report)
    return report


def invoice_sweep_handler(payments: Payments) -> Callable[[JobContext], Awaitable[dict[str, int]]]:
    async def handle(ctx: JobContext) -> dict[str, int]:
        del ctx
        report = await sweep(payments)
        return {"expired": report.expired, "captures_expired": report.captures_expired}

    return handle
