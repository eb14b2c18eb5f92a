"""NOTIFYs sent after their transaction commits, in small transactions that do not wait for the WAL.

PostgreSQL serialises the commits of every transaction that NOTIFYs: `PreCommit_Notify` takes one
lock per database and it is held until the transaction ends, across the commit's WAL flush
(src/backend/commands/async.c), so notifying transactions cannot share a group commit. The api's
create and confirm commit many small transactions at once; with a NOTIFY in each, their commits
queue on that lock one fsync at a time (docs/BENCHMARKS.md, "The NOTIFY lock").

`Notices` takes the notices out of the business transaction: the caller commits first, then hands
the notices here; one task per process sends everything queued meanwhile in one transaction with
`synchronous_commit = off`, whose commit takes the lock without waiting for a flush. What this trades:
a notice may be lost when the process dies between the commit and the send, or PostgreSQL between
the send and the flush. Every listener already covers a lost notice (the job workers poll every
`poll_interval_ms`; the SSE streams re-read their intent), so a lost notice costs latency only.
"""

from __future__ import annotations

import asyncio
import contextlib

from paymanager.db.pool import Pool
from paymanager.logging import get_logger

log = get_logger("paymanager.notices")

SEND = "SELECT pg_notify(c, p) FROM unnest($1::text[], $2::text[]) AS n (c, p)"


class Notices:
    """A process's post-commit NOTIFYs: `send` queues, one task sends whatever has queued."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool
        self._channels: list[str] = []
        self._payloads: list[str] = []
        self._task: asyncio.Task[None] | None = None

    def send(self, channel: str, payloads: list[str]) -> None:
        """Queue `payloads` on `channel`; call it after the commit of the change they announce."""
        if not payloads:
            return
        self._channels.extend([channel] * len(payloads))
        self._payloads.extend(payloads)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain(), name="notices")

    async def _drain(self) -> None:
        while self._payloads:
            channels, payloads = self._channels, self._payloads
            self._channels, self._payloads = [], []
            try:
                async with self._pool.acquire() as conn, conn.transaction():
                    await conn.execute("SET LOCAL synchronous_commit = off")
                    await conn.execute(SEND, channels, payloads)
            except Exception as exc:  # a lost notice costs latency, never correctness
                log.warning("notices not sent", count=len(payloads), error=str(exc))

    async def flush(self) -> None:
        """Wait until everything queued so far is sent (or given up)."""
        while self._task is not None and not self._task.done():
            with contextlib.suppress(Exception):
                await asyncio.shield(self._task)
