"""The `session-cleanup` role: expire active checkout sessions past their TTL (CleanupExpiredSessions).

A periodic job (one per CLEANUP_INTERVAL_MS slot cluster-wide, however many processes run the role)
takes at most CLEANUP_BATCH_SIZE due sessions, locked with SKIP LOCKED, and for each, in ONE
transaction with the expiry: CANCEL_GIFT for captured gift legs, RELEASE_HOLD for held card legs
(and for legs attempted with an unknown outcome), and the merchant's `session.expired`. It makes no
external call: the outbox worker runs the compensations. A session another transaction holds (a
confirm, an action recording its outcome, another cleanup) is skipped and taken by a later tick, so
two cleanups never expire one session twice, and a confirm and the expiry exclude each other.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from datetime import datetime

from paymanager.application.sessions import lifecycle
from paymanager.application.sessions.context import Sessions
from paymanager.application.sessions.store import SessionStore
from paymanager.domain.sessions import SessionStatus
from paymanager.jobs import JobContext
from paymanager.logging import get_logger

log = get_logger("paymanager.sessions.cleanup")

EXPIRED_REASON = "the session expired"


@dataclass
class CleanupResult:
    """One tick's figures, named as the source's CleanupResult."""

    scanned: int = 0
    expired: int = 0
    enqueuedCancelGifts: int = 0
    enqueuedReleases: int = 0


async def cleanup_expired_sessions(
    sessions: Sessions, batch_size: int, *, now: datetime | None = None
) -> CleanupResult:
    """Expire up to `batch_size` sessions due at `now` (the process clock's) in one transaction."""
    result = CleanupResult()
    payments = sessions.payments
    async with payments.pool.acquire() as conn, conn.transaction():
        store = SessionStore(conn)
        due = await store.lock_due(now=now or payments.clock(), limit=batch_size)
        result.scanned = len(due)
        for session in due:
            legs = await store.legs(session_id=session.id)
            _, enqueued = await lifecycle.end(
                sessions, conn, session, legs, SessionStatus.EXPIRED, EXPIRED_REASON
            )
            result.expired += 1
            result.enqueuedCancelGifts += enqueued.cancel_gifts
            result.enqueuedReleases += enqueued.releases
    return result


def cleanup_handler(sessions: Sessions) -> Callable[[JobContext], Awaitable[dict[str, int]]]:
    async def handle(ctx: JobContext) -> dict[str, int]:
        del ctx
        result = await cleanup_expired_sessions(sessions, sessions.payments.settings.cleanup_batch_size)
        if result.expired > 0:
            log.info("cleanup tick", **asdict(result))
        return asdict(result)

    return handle
