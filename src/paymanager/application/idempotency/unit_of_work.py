"""The unit of work of a POST: the work, its stored outcome and its Idempotency-Key commit together.

A POST is one transaction: the signature's replay memory and the key's claim (one statement), the
work, the stored outcome, the commit. The work runs first without a savepoint (two round trips fewer
per request); when it refuses the request, that transaction rolls back whole and the POST runs again
with the work in a savepoint, so the refusal is stored under the key with nothing of its effects. A
transient ledger conflict in a hold taken without its own savepoint runs the POST again whole.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime

import asyncpg
import orjson

from paymanager.application.context import Payments
from paymanager.application.errors import IdempotencyOutcomeLostError
from paymanager.application.idempotency import keys
from paymanager.application.idempotency.store import Reference
from paymanager.application.intents import events
from paymanager.application.intents.queries import intent_view, legacy_view, view_at
from paymanager.application.intents.settle import publish
from paymanager.application.intents.store import Intent, IntentStore
from paymanager.db.pool import Conn
from paymanager.domain.errors import DomainError
from paymanager.jobs import JOB_AVAILABLE_CHANNEL
from paymanager.ledger import LedgerConflictError


@dataclass(frozen=True, slots=True)
class IntentReply:
    """A response whose body is the view of `intent` (`intent_view`): its key keeps the intent's id,
    version and the body's digest instead of the body, and a replay rebuilds the body from the intent."""

    status_code: int
    intent: Intent


# The work of one POST: given the transaction's connection and the events it announces (NOTIFYed and
# published to Redis after the commit), it returns the status code
# and the JSON body of the response, or an `IntentReply`.
Work = Callable[[Conn, events.Pending], Awaitable[tuple[int, object] | IntentReply]]
# How a refusal (a `REFUSALS` exception) is answered: the status code and body stored under the key.
Refusal = Callable[[Exception], tuple[int, object]]
# How the work refuses a request: its own errors, or the schema catching input the code let through.
SCHEMA_REFUSALS = (asyncpg.CheckViolationError, asyncpg.StringDataRightTruncationError)
REFUSALS = (DomainError, *SCHEMA_REFUSALS)

# Runs of one POST again after a transient ledger conflict, before the conflict is raised.
LEDGER_CONFLICT_RETRIES_MAX = 4


class SignatureReplayedError(Exception):
    """The request's signature was accepted before: the POST is refused and nothing commits."""


@dataclass(frozen=True, slots=True)
class SignedPost:
    """One POST as the unit of work needs it: its key claim and the signature to remember."""

    claim: keys.KeyClaim
    signature: bytes
    signature_expires_at: datetime


@dataclass(frozen=True, slots=True)
class PostOutcome:
    status_code: int
    body: object
    replayed: bool


class _Refused(Exception):
    """The work refused the request outside a savepoint: its transaction must roll back."""


async def run_idempotent(payments: Payments, post: SignedPost, work: Work, refusal: Refusal) -> PostOutcome:
    """Run `work` once for the POST's key: its outcome, or the outcome stored by the first run.

    Raises `SignatureReplayedError`, `IdempotencyKeyReusedError`, or `LedgerConflictError` past
    `LEDGER_CONFLICT_RETRIES_MAX` runs again (nothing committed in each case)."""
    guarded = False
    conflicts = 0
    while True:
        # Nothing of a failed attempt committed, the signature's memory included, so the next one
        # remembers it as the first time.
        try:
            return await _transaction(payments, post, work, refusal, guarded=guarded)
        except _Refused:
            guarded = True  # a guarded attempt answers a refusal itself, so this happens once
        except LedgerConflictError:
            # A ledger batch that ran without a savepoint met a transient conflict (a nanosecond
            # timestamp taken by another process, a deadlock): the ledger's own retry, done whole.
            conflicts += 1
            if conflicts > LEDGER_CONFLICT_RETRIES_MAX:
                raise


async def _transaction(
    payments: Payments, post: SignedPost, work: Work, refusal: Refusal, *, guarded: bool
) -> PostOutcome:
    pending = events.Pending()
    claim = post.claim
    async with payments.pool.acquire() as conn, conn.transaction():
        fresh, stored = await keys.claim_signed(conn, claim, post.signature, post.signature_expires_at)
        if not fresh:
            raise SignatureReplayedError
        if stored is not None:
            return PostOutcome(stored.status_code, await _replayed_body(conn, stored), replayed=True)
        if guarded:
            reply = await _attempt(conn, work, pending, refusal)
        else:
            try:
                reply = await work(conn, pending)
            except REFUSALS as exc:
                raise _Refused from exc
        outcome = _outcome(reply)
        status, payload = outcome.status_code, outcome.body
        await keys.store(conn, claim, outcome, events.NOTIFY_CHANNEL, [])
    payments.notices.send(events.NOTIFY_CHANNEL, [events.notify_text(event) for event in pending.notified])
    for queue in pending.woken:
        payments.notices.send(JOB_AVAILABLE_CHANNEL, [queue])
    for event in pending.published:
        await publish(payments, event)
    return PostOutcome(status, payload, replayed=False)


def _outcome(reply: tuple[int, object] | IntentReply) -> keys.StoredOutcome:
    if not isinstance(reply, IntentReply):
        return keys.StoredOutcome(*reply)
    body = intent_view(reply.intent)
    digest = keys.kept(keys.body_digest(orjson.dumps(body)))
    return keys.StoredOutcome(
        reply.status_code, body, Reference(reply.intent.id, reply.intent.version, digest)
    )


async def _replayed_body(conn: Conn, stored: keys.StoredOutcome) -> object:
    """The stored body, or the body rebuilt from its reference when it still matches its digest."""
    ref = stored.reference
    if ref is None:
        return stored.body
    intent = await IntentStore(conn).get(intent_id=ref.intent_id)
    shown = view_at(intent, ref.version) if intent is not None else None
    body = intent_view(shown) if shown is not None else None
    if body is not None and not keys.matches(ref.digest, keys.body_digest(orjson.dumps(body))):
        body = legacy_view(body)
    if body is None or not keys.matches(ref.digest, keys.body_digest(orjson.dumps(body))):
        raise IdempotencyOutcomeLostError(
            "the first response to this Idempotency-Key can no longer be rebuilt (its intent was "
            "archived); send the request with a new key",
            {"intent_id": str(ref.intent_id)},
        )
    return body


async def _attempt(
    conn: Conn, work: Work, pending: events.Pending, refusal: Refusal
) -> tuple[int, object] | IntentReply:
    """Run the work in a savepoint: a refused request leaves no effect but its stored answer."""
    try:
        async with conn.transaction():
            return await work(conn, pending)
    except REFUSALS as exc:
        pending.clear()
        return refusal(exc)
