"""Back-pressure on the settlement queue: a default maximum depth, so a stopped outbox-worker makes
confirms answer 503 `queue_full` instead of letting the outbox grow without bound."""

from __future__ import annotations

from paymanager.application.intents.confirm import OUTBOX_QUEUE
from paymanager.db.pool import Conn
from paymanager.jobs import admin as job_admin
from paymanager.logging import get_logger

log = get_logger("paymanager.backpressure")


async def apply_default_max_depth(conn: Conn, max_depth: int) -> int | None:
    """Set OUTBOX_MAX_DEPTH on the settlement queue unless it already has a limit (an operator's
    `paymanager jobs max-depth` wins over the default); returns the limit in force."""
    queues = {queue.name: queue for queue in await job_admin.list_queues(conn)}
    current = queues.get(OUTBOX_QUEUE)
    if current is not None and current.max_depth is not None:
        return current.max_depth
    if max_depth == 0:
        return None
    await job_admin.set_max_depth(conn, OUTBOX_QUEUE, max_depth)
    log.info("settlement queue depth limited", queue=OUTBOX_QUEUE, max_depth=max_depth)
    return max_depth
