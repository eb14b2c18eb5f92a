"""The operator's view beyond the job engine: the query gauges of the PSP step, the balance monitor,
the webhooks and the sessions; the queues' throughput from the database; an intent's timeline; and
the audited resolution of a PSP manual review, the one implementation behind the admin API, the
dashboard and the CLI. `ops.sql` is read here only."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from paymanager.application.admin.use_cases import Actor, JobFilter, _audit, list_jobs
from paymanager.application.context import Payments
from paymanager.application.ids import transfer_id
from paymanager.application.intents import events
from paymanager.application.psp import review
from paymanager.application.psp.store import PspTx
from paymanager.db.pool import Conn
from paymanager.db.sql import load_queries
from paymanager.jobs import admin as engine_admin
from paymanager.ledger.types import Transfer, TransferFlags
from paymanager.metrics import QueryGauge, QueryGauges, Sample

Q = load_queries("paymanager.application.admin", "ops.sql")

# The balance monitor's states (application/psp/balance.py), each a member of the state-set gauge.
BALANCE_STATES = ("balance_ok", "low_partner_balance", "balance_drift", "balance_check_failed")
# The span the dashboard's "completed per minute" is measured over.
THROUGHPUT_WINDOW_S = 300


# --- query gauges ------------------------------------------------------------------------------


async def _manual_review(conn: Conn) -> Sequence[Sample]:
    return [((row["psp"],), row["n"]) for row in await conn.fetch(Q["psp_manual_review"])]


async def _manual_review_age(conn: Conn) -> Sequence[Sample]:
    return [((row["psp"],), row["oldest_s"]) for row in await conn.fetch(Q["psp_manual_review"])]


async def _balance_state(conn: Conn) -> Sequence[Sample]:
    samples: list[Sample] = []
    for row in await conn.fetch(Q["psp_balance_states"]):
        for state in BALANCE_STATES:
            samples.append(((row["psp"], row["currency"], state), 1.0 if row["state"] == state else 0.0))
    return samples


async def _balance_checked(conn: Conn) -> Sequence[Sample]:
    return [
        ((row["psp"], row["currency"]), row["checked_at"])
        for row in await conn.fetch(Q["psp_balance_states"])
    ]


async def _endpoints_disabled(conn: Conn) -> Sequence[Sample]:
    return [((), float(await conn.fetchval(Q["webhook_endpoints_disabled"])))]


async def _deliveries_dead(conn: Conn) -> Sequence[Sample]:
    return [((), float(await conn.fetchval(Q["webhook_deliveries_dead"])))]


async def _sessions(conn: Conn) -> Sequence[Sample]:
    return [((row["status"],), row["n"]) for row in await conn.fetch(Q["checkout_sessions_by_status"])]


def register_ops_gauges(gauges: QueryGauges) -> None:
    """The PSP, balance, webhook and session gauges (computed once per interval cluster-wide)."""
    for gauge in (
        QueryGauge(
            "paymanager_psp_manual_review",
            "PSP transactions waiting in MANUAL_REVIEW for a person, by PSP.",
            ("psp",),
            _manual_review,
        ),
        QueryGauge(
            "paymanager_psp_manual_review_oldest_age_seconds",
            "Per PSP, how long the oldest transaction in MANUAL_REVIEW has waited.",
            ("psp",),
            _manual_review_age,
        ),
        QueryGauge(
            "paymanager_psp_balance_state",
            "The balance monitor's latest state per PSP and currency: 1 for the current state, 0 for "
            "the others (balance_ok, low_partner_balance, balance_drift, balance_check_failed).",
            ("psp", "currency", "state"),
            _balance_state,
        ),
        QueryGauge(
            "paymanager_psp_balance_checked_timestamp_seconds",
            "When the balance monitor last checked a PSP's currency (unix time).",
            ("psp", "currency"),
            _balance_checked,
        ),
        QueryGauge(
            "paymanager_webhook_endpoints_disabled",
            "Merchant webhook endpoints disabled (a 410, or failing for WEBHOOK_DISABLE_AFTER_FAILING_SEC).",
            (),
            _endpoints_disabled,
        ),
        QueryGauge(
            "paymanager_webhook_deliveries_dead",
            "Webhook deliveries dead now, waiting for a replay.",
            (),
            _deliveries_dead,
        ),
        QueryGauge(
            "paymanager_checkout_sessions",
            "Checkout sessions by status.",
            ("status",),
            _sessions,
        ),
    ):
        gauges.register(gauge)


# --- throughput --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Throughput:
    """A queue's completed jobs per minute over the last `window_s`, cluster-wide. `at_least`: the
    queue holds as many completed jobs as retention keeps, so pruned ones may be missing and the
    true rate may be higher."""

    per_minute: float
    at_least: bool


async def throughput(
    conn: Conn, *, kept_max: int, window_s: int = THROUGHPUT_WINDOW_S
) -> dict[str, Throughput]:
    """Per queue, from the completed jobs' `finalized_at` (every process's completions, not this
    process's counters); `kept_max` is JOB_RETENTION_COMPLETED_COUNT."""
    rows = await conn.fetch(Q["queue_throughput"], float(window_s))
    return {
        row["queue"]: Throughput(row["recent"] * 60 / window_s, kept_max > 0 and row["kept"] >= kept_max)
        for row in rows
    }


# --- an intent's timeline ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TimelineEntry:
    """One thing that happened to an intent: when, from which part (intent, ledger, job, psp,
    refund, webhook), what, and the dashboard page that shows more (if any)."""

    at: datetime
    source: str
    text: str
    link: str | None = None


def _ns(timestamp: int) -> datetime:
    return datetime.fromtimestamp(timestamp / 1e9, tz=UTC)


def _transfer_text(purpose: str, transfer: Transfer) -> str:
    if transfer.flags & TransferFlags.POST_PENDING_TRANSFER:
        kind = "post"
    elif transfer.flags & TransferFlags.VOID_PENDING_TRANSFER:
        kind = "void"
    elif transfer.flags & TransferFlags.PENDING:
        kind = "hold"
    else:
        kind = "transfer"
    accounts = ""
    if transfer.debit_account_id and transfer.credit_account_id:
        accounts = (
            f" {uuid.UUID(int=transfer.debit_account_id)} -> {uuid.UUID(int=transfer.credit_account_id)}"
        )
    return f"ledger {kind} ({purpose}) {transfer.amount}{accounts}"


async def intent_timeline(payments: Payments, conn: Conn, intent_id: uuid.UUID) -> list[TimelineEntry] | None:
    """Everything recorded about an intent, oldest first: its status changes, its ledger transfers
    (looked up by their derived ids, so on either ledger), its jobs, its PSP transaction, its refunds
    and the webhook deliveries of its events. None when there is no such intent."""
    intent = await conn.fetchrow(Q["timeline_intent"], intent_id)
    if intent is None:
        return None
    entries = [TimelineEntry(intent["created_at"], "intent", "created")]
    if intent["confirmed_at"] is not None:
        entries.append(TimelineEntry(intent["confirmed_at"], "intent", "confirmed"))
    if intent["finished_at"] is not None:
        reason = f": {intent['failure_reason']}" if intent["failure_reason"] else ""
        entries.append(TimelineEntry(intent["finished_at"], "intent", f"{intent['status']}{reason}"))

    purposes: dict[int, str] = {}
    if intent["hold_id"] is not None:
        for action in ("hold", "post", "void"):
            for leg in ("amount", "fee"):
                purposes[transfer_id(intent["hold_id"], f"{action}.{leg}")] = leg
    refunds = await conn.fetch(Q["timeline_refunds"], intent_id)
    for refund in refunds:
        for leg in ("amount", "fee"):
            purposes[transfer_id(refund["id"], f"refund.{leg}")] = f"refund {leg}"
        entries.append(
            TimelineEntry(
                refund["created_at"], "refund", f"refund {refund['id']} of {refund['amount']} requested"
            )
        )
        if refund["finished_at"] is not None:
            why = f": {refund['failure_reason']}" if refund["failure_reason"] else ""
            entries.append(
                TimelineEntry(
                    refund["finished_at"], "refund", f"refund {refund['id']} {refund['status']}{why}"
                )
            )
    if purposes:
        for transfer in await payments.ledger.lookup_transfers(list(purposes)):
            entries.append(
                TimelineEntry(
                    _ns(transfer.timestamp), "ledger", _transfer_text(purposes[transfer.id], transfer)
                )
            )

    psp = await conn.fetchrow(Q["timeline_psp_tx"], intent_id)
    jobs = await list_jobs(conn, JobFilter(intent_id=intent_id), limit=100)
    if psp is not None:
        tx = PspTx.from_row(psp)
        # The payout's jobs name its PSP transaction, not the intent.
        jobs += await engine_admin.list_jobs(conn, limit=100, payload_contains={"psp_tx_id": str(tx.id)})
        link = f"/dashboard/psp/{tx.id}"
        entries.append(TimelineEntry(tx.created_at, "psp", f"PSP {tx.psp} transaction {tx.id} created", link))
        detail = f" after {tx.attempts} tries" if tx.attempts else ""
        error = f"; last error: {tx.last_error}" if tx.last_error else ""
        entries.append(
            TimelineEntry(tx.updated_at, "psp", f"PSP {tx.psp} {tx.state.value}{detail}{error}", link)
        )
        if tx.resolved_at is not None:
            entries.append(
                TimelineEntry(tx.resolved_at, "psp", f"resolved by {tx.resolved_by}: {tx.resolution}", link)
            )
    for job in {int(str(job["id"])): job for job in jobs}.values():
        link = f"/dashboard/jobs/{job['id']}"
        created, finalized = job["created_at"], job.get("finalized_at")
        assert isinstance(created, datetime)
        entries.append(TimelineEntry(created, "job", f"job {job['id']} {job['kind']} enqueued", link))
        if isinstance(finalized, datetime):
            entries.append(
                TimelineEntry(finalized, "job", f"job {job['id']} {job['kind']} {job['state']}", link)
            )

    for row in await conn.fetch(Q["timeline_webhooks"], intent_id):
        code = f" (last answer {row['last_status_code']})" if row["last_status_code"] else ""
        text = f"webhook {row['type']} to {row['endpoint_id']}: {row['status']}"
        text += f" after {row['attempts']} attempt(s){code}"
        entries.append(TimelineEntry(row["last_attempt_at"] or row["created_at"], "webhook", text))
    entries.sort(key=lambda entry: entry.at)
    return entries


# --- PSP manual review -------------------------------------------------------------------------


async def resolve_psp(
    payments: Payments,
    conn: Conn,
    actor: Actor,
    tx_id: uuid.UUID,
    *,
    completed_ref: str | None,
    failed_reason: str | None,
    pending: list[events.Event],
) -> PspTx:
    """Resolve a transaction in MANUAL_REVIEW (review.resolve) and write its audit row, both in one
    transaction on `conn` (the caller's, when it has one open); the intent's event is appended to
    `pending`, to publish after the commit. Refusals (`DomainError`) change nothing."""
    by = actor.id if actor.via == "cli" else f"{actor.via}:{actor.id}"
    async with conn.transaction():
        before = await review.get_tx(conn, tx_id)
        resolved = await review.resolve(
            payments, conn, tx_id, completed_ref=completed_ref, failed_reason=failed_reason, by=by,
            pending=pending,
        )  # fmt: skip
        await _audit(
            conn, actor, "psp.resolve", f"psp_tx:{tx_id}",
            {"state": before.state.value},
            {"state": resolved.state.value, "resolution": resolved.resolution,
             "intent_id": str(resolved.intent_id)},
        )  # fmt: skip
    return resolved


# --- balances ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BalanceAlertView:
    psp: str
    currency: str
    state: str
    previous_state: str | None
    raised_at: datetime


async def recent_balance_alerts(conn: Conn, *, limit: int = 50) -> list[BalanceAlertView]:
    """The balance monitor's latest state changes, newest first."""
    rows = await conn.fetch(Q["balance_alerts_recent"], limit)
    return [
        BalanceAlertView(r["psp"], r["currency"], r["state"], r["previous_state"], r["raised_at"])
        for r in rows
    ]
