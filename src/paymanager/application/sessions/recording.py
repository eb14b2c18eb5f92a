"""Step 3 of the session actions, for many jobs at once: their outcomes in shared fenced transactions.

Each action records its provider's answer under its session's lock in a transaction that also
completes its job, fenced by the job's lease (a worker that lost the lease records nothing). The
actions a worker runs at once record together (`paymanager.jobs.batch.SharedTransactions`): ONE
transaction for the group, whose commit (and WAL flush) they share, each job still fenced by its own
lease, instead of a transaction per action. The completion of a session writes the ledger's record
of the merchant's settlement, which locks the merchant's and the funding account's rows until the
commit: in a group, one lock for many completions, not one each.

Locks: the group first locks the sessions of all its legs in id order (one statement), the order
every group uses, so two groups (two worker processes) cannot deadlock on two sessions.

Isolation: the group's records run inside one savepoint; when one of them raises, the savepoint is
rolled back and the group runs again without it (that job alone gets its exception and is retried or
dead-lettered as usual), so a failing action never leaves a partial write and never fails the others.
Each run drops at least one record, so a group of N runs at most N times. Errors that concern the
transaction rather than one record (a deadlock, a lost connection, a timeout) fail the whole group:
nothing of it commits and `SharedTransactions` retries a deadlock from the start.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import asyncpg

from paymanager.application.sessions.store import SessionStore
from paymanager.db.pool import Conn, Pool
from paymanager.jobs import JobContext
from paymanager.jobs.batch import SharedTransactions

# Errors of the shared transaction itself, not of one record: the whole group fails with them.
GROUP_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.DeadlockDetectedError,
    asyncpg.SerializationError,
    asyncpg.QueryCanceledError,
    asyncpg.InterfaceError,
    asyncpg.PostgresConnectionError,
    OSError,
)

# One record: the leg, and what to write for it on the group's connection.
Apply = Callable[[Conn, uuid.UUID], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Record:
    leg_id: uuid.UUID
    apply: Apply


async def record_group(conn: Conn, items: list[tuple[JobContext, Record]]) -> list[Exception | None]:
    """The work of a shared transaction (jobs/batch.py): the group's records."""
    return await apply_isolated(conn, [record for _, record in items])


async def apply_isolated(conn: Conn, records: list[Record]) -> list[Exception | None]:
    """`records` on `conn`'s open transaction, the sessions locked first; per record, None or its own
    exception (nothing of a record that raised is written, and the others are)."""
    if len(records) == 1:
        # Alone, a record's failure is the group's: no savepoint needed to keep others' writes.
        await records[0].apply(conn, records[0].leg_id)
        return [None]
    await SessionStore(conn).lock_of_legs(leg_ids=[record.leg_id for record in records])
    outcomes: list[Exception | None] = [None] * len(records)
    pending = list(range(len(records)))
    while pending:
        current: int | None = None
        try:
            async with conn.transaction():  # a savepoint inside the shared transaction
                for index in pending:
                    current = index
                    await records[index].apply(conn, records[index].leg_id)
                current = None
            return outcomes
        except GROUP_ERRORS:
            raise
        except Exception as exc:
            if current is None:
                raise  # the savepoint's own statements failed: not a record's fault
            outcomes[current] = exc
            pending.remove(current)
    return outcomes


class Recorder:
    """The outcomes of one worker's session actions, recorded in shared fenced transactions."""

    def __init__(self, pool: Pool, *, batch_max: int, batches_in_flight_max: int) -> None:
        self._shared: SharedTransactions[Record, None] = SharedTransactions(
            pool, record_group, batch_max=batch_max, batches_in_flight_max=batches_in_flight_max
        )

    async def record(self, ctx: JobContext, leg_id: uuid.UUID, apply: Apply) -> None:
        """Run `apply` for `leg_id` in a shared transaction that completes job `ctx`; raises its
        exception (nothing of it written), or `LeaseLostError` when the job's lease is gone."""
        await self._shared.run(ctx, Record(leg_id, apply))
