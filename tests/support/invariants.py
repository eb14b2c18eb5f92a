"""What must hold after any run of the whole service, however it was treated: the invariant checker
of the chaos suites, reusable by any test that drove real processes against a database and the
sandboxes.

It reads the database (intents, the ledger, PSP transactions, sessions, webhook deliveries and their
jobs) and what the outside parties recorded (the PSP sandbox's submissions and transfers, the
gift-card and card sandboxes' counters and balances, the merchant receiver's log of deliveries), and
returns every violation it finds with the figures of the run. A check names the rows it blames.

The states a finished run may leave, and why each is allowed (docs/state_machines.md):

- an intent is terminal (settled, failed, cancelled, expired), or `created` (never confirmed: it
  waits for its payer; a merchant invoice only until its expiry), or a payout (ipps-, qp- or
  wise-transfer) `confirmed` with its PSP transaction in MANUAL_REVIEW (the hold kept until an
  operator resolves it);
- a checkout session is terminal, its legs settled the way its status says (completed: every leg
  captured; otherwise every gift leg cancelled or failed and the card released or failed);
- a webhook delivery is `succeeded` or `dead` (its endpoint kept failing).

Webhooks are delivered at least once: paymanager records an answer after the receiver gave it, so an
answer lost on the way back (the worker killed after the POST, the database gone before the outcome
was written, the lease lost while waiting) makes the delivery go again with the same event id. The
checker accepts a repeated delivery of an event to an endpoint only as such a retry: the delivery's
job must have recorded at least as many attempts that ended without an answer written (a `Stalled`
rescue or an error) as there were repeats. A repeat with no lost attempt behind it is a violation,
and so is a delivery the receiver refused for its signature (other than `replayed`: a retry signed
in the same second carries the same signature as the answer that was lost, and the receiver's
refusal sends it again later with a fresh one).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from paymanager.domain.channels import PAYOUT_CHANNEL_PSPS

TERMINAL_INTENT = frozenset({"settled", "failed", "cancelled", "expired"})
TERMINAL_SESSION = frozenset({"completed", "failed", "cancelled", "expired"})
# How many offending ids a violation names; the count says how many there were.
NAMED_MAX = 5
TRANSFER_PENDING, TRANSFER_POST, TRANSFER_VOID = 2, 4, 8


@dataclass
class SandboxRecords:
    """What the outside parties saw, read from the sandboxes after the run."""

    # The PSP sandbox: transfer POSTs per reference (the PSP transaction's id), and each transfer
    # as "<dialect>:<reference>" -> {"status", "amount"}.
    psp_submissions: dict[str, int] = field(default_factory=dict)
    psp_transfers: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The gift-card sandbox: counters per card, and each card's balance before and after.
    gift_counters: dict[str, dict[str, int]] = field(default_factory=dict)
    gift_balances: dict[str, tuple[int, int]] = field(default_factory=dict)
    # The card sandbox: counters per authorisation key ("<leg id>.authorize").
    card_counters: dict[str, dict[str, int]] = field(default_factory=dict)
    # The merchant receiver's log (`GET /_control/received`), and the path each endpoint posts to.
    receipts: list[dict[str, Any]] = field(default_factory=list)
    endpoint_paths: dict[str, str] = field(default_factory=dict)


@dataclass
class Findings:
    violations: list[str] = field(default_factory=list)
    figures: dict[str, int] = field(default_factory=dict)

    def blame(self, what: str, ids: list[Any]) -> None:
        if ids:
            named = ", ".join(str(i) for i in ids[:NAMED_MAX])
            self.violations.append(f"{what}: {len(ids)} ({named}{', ...' if len(ids) > NAMED_MAX else ''})")

    def summary(self) -> str:
        return ", ".join(f"{name} {value}" for name, value in sorted(self.figures.items()))


async def check_whole_service(pool: asyncpg.Pool, records: SandboxRecords) -> Findings:
    """Every invariant below, over everything the database and the sandboxes hold."""
    findings = Findings()
    async with pool.acquire() as conn:
        await _check_intents(conn, findings)
        await _check_holds(conn, findings)
        await _check_payouts(conn, records, findings)
        await _check_sessions(conn, records, findings)
        await _check_webhooks(conn, records, findings)
    return findings


async def _check_intents(conn: asyncpg.Connection, findings: Findings) -> None:
    rows = await conn.fetch(
        "SELECT i.id, i.channel, i.status, i.expires_at < now() AS due, t.state AS psp_state"
        " FROM intent AS i LEFT JOIN psp_tx AS t ON t.intent_id = i.id"
    )
    by_status = Counter(f"{r['channel']}.{r['status']}" for r in rows)
    findings.figures.update({f"intents {key}": count for key, count in by_status.items()})
    stuck = [
        r["id"]
        for r in rows
        if r["status"] not in TERMINAL_INTENT
        and r["status"] != "created"
        and not (r["channel"] in PAYOUT_CHANNEL_PSPS and r["psp_state"] == "MANUAL_REVIEW")
    ]
    findings.blame("intents neither terminal nor in a documented waiting state", stuck)
    findings.blame(
        "merchant invoices left created past their expiry",
        [
            r["id"]
            for r in rows
            if r["channel"] == "merchant-invoice" and r["status"] == "created" and r["due"]
        ],
    )
    findings.blame(
        "intents confirmed for a PSP whose transaction is not in MANUAL_REVIEW",
        [
            r["id"]
            for r in rows
            if r["status"] == "confirmed" and r["psp_state"] not in (None, "MANUAL_REVIEW")
        ],
    )


async def _check_holds(conn: asyncpg.Connection, findings: Findings) -> None:
    """Each hold posted or voided at most once, and as its intent's status says; one settlement row
    per intent, agreeing with the status."""
    resolved_twice = await conn.fetch(
        "SELECT r.pending_id FROM ledger_transfer AS r WHERE r.pending_id IS NOT NULL"
        " GROUP BY r.pending_id HAVING count(*) > 1"
    )
    findings.blame("holds posted or voided more than once", [r["pending_id"] for r in resolved_twice])
    holds = await conn.fetch(
        "SELECT i.id, i.status, count(*) AS holds,"
        "  count(*) FILTER (WHERE r.flags & $1 <> 0) AS posted,"
        "  count(*) FILTER (WHERE r.flags & $2 <> 0) AS voided"
        " FROM intent AS i JOIN ledger_transfer AS p ON p.user_data_128 = i.id AND p.flags & $3 <> 0"
        " LEFT JOIN ledger_transfer AS r ON r.pending_id = p.id"
        " GROUP BY i.id, i.status",
        TRANSFER_POST, TRANSFER_VOID, TRANSFER_PENDING,
    )  # fmt: skip
    findings.figures["holds"] = sum(r["holds"] for r in holds)
    findings.blame(
        "settled intents whose holds are not all posted (or some voided)",
        [r["id"] for r in holds if r["status"] == "settled" and (r["posted"] != r["holds"] or r["voided"])],
    )
    findings.blame(
        "failed or cancelled intents with a hold posted",
        [r["id"] for r in holds if r["status"] in ("failed", "cancelled") and r["posted"]],
    )
    findings.blame(
        "confirmed intents with a hold already posted or voided",
        [r["id"] for r in holds if r["status"] == "confirmed" and (r["posted"] or r["voided"])],
    )
    findings.blame(
        "intents never confirmed that hold money",
        [r["id"] for r in holds if r["status"] in ("created", "expired")],
    )
    disagreeing = await conn.fetch(
        "SELECT i.id FROM intent AS i JOIN settlement AS s ON s.intent_id = i.id"
        " WHERE (s.outcome = 'posted') <> (i.status = 'settled')"
    )
    findings.blame("settlement rows that disagree with their intent", [r["id"] for r in disagreeing])
    unsettled = await conn.fetch(
        "SELECT i.id FROM intent AS i WHERE i.status = 'settled'"
        " AND NOT EXISTS (SELECT FROM settlement AS s WHERE s.intent_id = i.id)"
    )
    findings.blame("settled intents without a settlement row", [r["id"] for r in unsettled])


async def _check_payouts(conn: asyncpg.Connection, records: SandboxRecords, findings: Findings) -> None:
    """The PSP was sent each transfer once, and paymanager's outcome is the PSP's."""
    findings.figures["psp submissions"] = sum(records.psp_submissions.values())
    findings.blame(
        "PSP transfers submitted more than once",
        sorted(ref for ref, count in records.psp_submissions.items() if count > 1),
    )
    rows = await conn.fetch(
        "SELECT t.id, t.state, i.status FROM psp_tx AS t JOIN intent AS i ON i.id = t.intent_id"
    )
    findings.figures.update({f"psp_tx {k}": v for k, v in Counter(r["state"] for r in rows).items()})
    allowed = {("COMPLETED", "settled"), ("FAILED", "failed"), ("MANUAL_REVIEW", "confirmed")}
    findings.blame(
        "PSP transactions whose intent disagrees (or that did not finish)",
        [f"{r['id']}={r['state']}/{r['status']}" for r in rows if (r["state"], r["status"]) not in allowed],
    )
    sent = {key.split(":", 1)[1]: transfer for key, transfer in records.psp_transfers.items()}
    findings.blame(
        "payouts settled that the PSP did not complete",
        [r["id"] for r in rows if r["state"] == "COMPLETED" and _psp_status(sent, r) != "completed"],
    )
    findings.blame(
        "payouts failed although the PSP completed them",
        [r["id"] for r in rows if r["state"] == "FAILED" and _psp_status(sent, r) == "completed"],
    )
    known = {str(r["id"]) for r in rows}
    findings.blame("PSP transfers of no PSP transaction", sorted(set(sent) - known))


def _psp_status(sent: dict[str, dict[str, Any]], row: asyncpg.Record) -> str | None:
    status = sent.get(str(row["id"]), {}).get("status")
    return None if status is None else str(status)


async def _check_sessions(conn: asyncpg.Connection, records: SandboxRecords, findings: Findings) -> None:
    sessions = await conn.fetch("SELECT id, status, amount FROM checkout_session")
    legs = await conn.fetch(
        "SELECT l.id, l.session_id, l.kind, l.status, l.amount, l.instrument, s.status AS session_status"
        " FROM checkout_session_leg AS l JOIN checkout_session AS s ON s.id = l.session_id"
    )
    findings.figures.update({f"sessions {k}": v for k, v in Counter(s["status"] for s in sessions).items()})
    findings.blame(
        "sessions not terminal", [s["id"] for s in sessions if s["status"] not in TERMINAL_SESSION]
    )
    ended = {"gift_card": {"cancelled", "failed"}, "card": {"released", "failed"}}
    findings.blame(
        "legs that disagree with their session's end",
        [f"{leg['id']}={leg['kind']}/{leg['status']}" for leg in legs if not _leg_agrees(leg, ended)],
    )
    await _check_session_ledger(conn, sessions, findings)
    await _check_session_events(conn, sessions, findings)
    await _check_compensation_jobs(conn, findings)
    _check_gift_cards(legs, records, findings)
    _check_card_holds(legs, records, findings)


def _leg_agrees(leg: asyncpg.Record, ended: dict[str, set[str]]) -> bool:
    if leg["session_status"] == "completed":
        return bool(leg["status"] == "captured")
    if leg["session_status"] in TERMINAL_SESSION:
        return leg["status"] in ended[leg["kind"]]
    return True  # an unfinished session is blamed by itself


async def _check_session_ledger(
    conn: asyncpg.Connection, sessions: list[asyncpg.Record], findings: Findings
) -> None:
    """A completed session's settlement posted once (its transfers sum to its amount), no other's."""
    moved = {
        r["session_id"]: int(r["total"])
        for r in await conn.fetch(
            "SELECT s.id AS session_id, sum(t.amount) AS total FROM checkout_session AS s"
            " JOIN ledger_transfer AS t ON t.user_data_128 = s.id GROUP BY s.id"
        )
    }
    findings.blame(
        "sessions whose ledger record is not their amount once (completed) or nothing (otherwise)",
        [s["id"] for s in sessions if moved.get(s["id"], 0) != _settled_amount(s)],
    )


def _settled_amount(session: asyncpg.Record) -> int:
    return int(session["amount"]) if session["status"] == "completed" else 0


async def _check_session_events(
    conn: asyncpg.Connection, sessions: list[asyncpg.Record], findings: Findings
) -> None:
    events = await conn.fetch("SELECT session_id, type FROM checkout_session_event")
    by_session: dict[Any, list[str]] = {}
    for event in events:
        by_session.setdefault(event["session_id"], []).append(event["type"])
    findings.blame(
        "ended sessions without exactly one event of their end",
        [s["id"] for s in sessions if s["status"] in TERMINAL_SESSION
         and by_session.get(s["id"]) != [f"session.{s['status']}"]],
    )  # fmt: skip


async def _check_compensation_jobs(conn: asyncpg.Connection, findings: Findings) -> None:
    """Each action at most once per leg (its unique key); no compensation or capture dead."""
    jobs = await conn.fetch(
        "SELECT kind, payload ->> 'leg_id' AS leg_id, state::text AS state,"
        " last_error ->> 'error' AS error FROM job WHERE queue = 'session-actions'"
    )
    per_leg = Counter((j["kind"], j["leg_id"]) for j in jobs)
    findings.figures.update({f"session jobs {k}": v for k, v in Counter(j["kind"] for j in jobs).items()})
    findings.blame(
        "session actions enqueued twice for a leg",
        sorted(f"{k}:{leg}" for (k, leg), n in per_leg.items() if n > 1),
    )
    findings.blame(
        "compensations or captures dead-lettered (a customer's money or hold left behind)",
        [f"{j['kind']} {j['leg_id']}: {j['error']}" for j in jobs
         if j["kind"] in ("CANCEL_GIFT", "RELEASE_HOLD", "CAPTURE_PSP") and j["state"] == "dead"],
    )  # fmt: skip


def _check_gift_cards(legs: list[asyncpg.Record], records: SandboxRecords, findings: Findings) -> None:
    """No card debited twice or left debited for a session that did not complete: each card's
    balance is its first less the gift legs still captured on it."""
    gift = [leg for leg in legs if leg["kind"] == "gift_card"]
    captured: Counter[str] = Counter()
    for leg in gift:
        if leg["status"] == "captured":
            captured[leg["instrument"]] += int(leg["amount"])
    wrong = [
        f"{card}: {final} != {first} - {captured[card]}"
        for card, (first, final) in records.gift_balances.items()
        if final != first - captured[card]
    ]
    findings.blame("gift cards whose balance disagrees with the captured legs", wrong)
    uses = Counter(leg["instrument"] for leg in gift)
    counters = records.gift_counters
    findings.blame(
        "gift cards debited more often than legs used them",
        sorted(c for c, n in counters.items() if n.get("debits_applied", 0) > uses[c]),
    )
    findings.blame(
        "gift card debits cancelled more than once",
        sorted(c for c, n in counters.items() if n.get("cancels_applied", 0) > n.get("debits_applied", 0)),
    )
    findings.figures["gift debits"] = sum(n.get("debits_applied", 0) for n in counters.values())
    findings.figures["gift cancels"] = sum(n.get("cancels_applied", 0) for n in counters.values())


def _check_card_holds(legs: list[asyncpg.Record], records: SandboxRecords, findings: Findings) -> None:
    """Each card authorisation made at most once, then captured or released exactly once (never
    both, never left held), and as the leg says."""
    counters = records.card_counters
    status = {f"{leg['id']}.authorize": leg["status"] for leg in legs if leg["kind"] == "card"}
    bad = []
    for key, n in counters.items():
        made, captured, released = (
            n.get("authorizations_applied", 0), n.get("captures_applied", 0), n.get("releases_applied", 0)
        )  # fmt: skip
        leg = status.get(key)
        if made > 1 or captured + released > made or (made and captured + released != 1):
            bad.append(f"{key}: made {made}, captured {captured}, released {released}")
        elif (leg == "captured") != bool(captured):
            bad.append(f"{key}: leg {leg}, captured {captured}")
    findings.blame("card authorisations not made once then captured or released once", bad)
    findings.figures["card holds"] = sum(n.get("authorizations_applied", 0) for n in counters.values())
    findings.figures["card releases"] = sum(n.get("releases_applied", 0) for n in counters.values())


async def _check_webhooks(conn: asyncpg.Connection, records: SandboxRecords, findings: Findings) -> None:
    deliveries = await conn.fetch(
        "SELECT d.id, d.event_id, d.endpoint_id, d.status, coalesce(jsonb_array_length(j.errors), 0) AS lost"
        " FROM webhook_delivery AS d LEFT JOIN job AS j ON j.id = d.job_id"
    )
    findings.figures.update(
        {f"deliveries {k}": v for k, v in Counter(d["status"] for d in deliveries).items()}
    )
    await _check_every_event_delivered(conn, findings)
    findings.blame(
        "deliveries neither succeeded nor dead-lettered",
        [d["id"] for d in deliveries if d["status"] not in ("succeeded", "dead")],
    )
    paths = records.endpoint_paths
    accepted: Counter[tuple[str, str]] = Counter()
    refused = []
    for receipt in records.receipts:
        if receipt["verified"] is not True:
            if receipt["reason"] != "replayed":
                refused.append(f"{receipt['path']}:{receipt['event_id']}: {receipt['reason']}")
            continue
        if 200 <= int(receipt["answered"]) < 300:
            accepted[(receipt["path"], str(receipt["event_id"]))] += 1
    findings.blame("deliveries the receiver could not verify", refused)
    findings.figures["receipts verified"] = sum(accepted.values())
    known = {(paths.get(d["endpoint_id"], "?"), d["event_id"]) for d in deliveries}
    findings.blame(
        "deliveries received of no delivery row", sorted(f"{p}:{e}" for p, e in set(accepted) - known)
    )
    missing, unexplained, repeats = [], [], 0
    for d in deliveries:
        got = accepted[(paths.get(d["endpoint_id"], "?"), d["event_id"])]
        if d["status"] == "succeeded" and got == 0:
            missing.append(d["id"])
        elif d["status"] == "dead" and got > d["lost"]:
            # A dead letter may have reached the receiver only on attempts whose answer was lost.
            unexplained.append(f"{d['id']}: dead but received {got}, lost answers {d['lost']}")
        if got > 1:
            repeats += got - 1
            if got - 1 > d["lost"]:
                unexplained.append(f"{d['id']}: received {got}, lost answers {d['lost']}")
    findings.figures["deliveries repeated after a lost answer"] = repeats
    findings.blame("deliveries succeeded that the receiver never accepted", missing)
    findings.blame("deliveries received more than once without a lost answer", unexplained)


async def _check_every_event_delivered(conn: asyncpg.Connection, findings: Findings) -> None:
    """One delivery per event and endpoint of its service subscribed to its type."""
    gaps = await conn.fetch(
        "SELECT e.id, w.id AS endpoint_id FROM webhook_event AS e"
        " JOIN webhook_endpoint AS w ON w.service_id = e.service_id AND w.created_at <= e.created_at"
        "  AND (e.type = ANY (w.event_types) OR '*' = ANY (w.event_types))"
        " LEFT JOIN webhook_delivery AS d ON d.event_id = e.id AND d.endpoint_id = w.id"
        " WHERE d.id IS NULL"
    )
    findings.blame(
        "events without a delivery to a subscribed endpoint", [f"{g['id']}->{g['endpoint_id']}" for g in gaps]
    )
    findings.figures["webhook events"] = int(await conn.fetchval("SELECT count(*) FROM webhook_event"))
