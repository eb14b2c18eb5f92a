"""Step 3 of the session actions, for many jobs at once: their outcomes in shared fenced transactions.

Each action records its provider's answer under its session's lock in a transaction that also
completes its job, fenced by the job's lease (a worker that lost the lease records nothing). The
actions a worker runs at once record together (`paymanager.jobs.batch.SharedTransactions`): ONE
transaction for the group, whose commit (and WAL flush) they share, each job still fenced by its own
lease, instead of a transaction per action. The completion of a session writes the ledger's record
of the merchant's settlement, which locks the merchant's and the funding account's rows until the
commit: in a group, one lock for many completions, not one each.

Reads: the group locks the sessions of all its legs in id order in one statement (the order every
group uses, so two groups, two worker processes, cannot deadlock on two sessions), then reads their
legs in one more, whatever the group's size.
Each record gets its session and legs from that read and returns them as its writes left them, so a
later record of the same session in the group sees them current without reading them again; a
record that cannot say (the end of a session, which moves its other legs too) makes the next one
read them again. The completions' ledger records are written together after the records: ONE
ledger batch per group (each session its own linked chain), last before the commit.

Isolation: the group's records run inside one savepoint; when one of them raises, or the ledger
refuses its chain, the savepoint is rolled back and the group runs again without it (that job alone
gets its exception and is retried or dead-lettered as usual), so a failing action never leaves a
partial write and never fails the others. Each run drops at least one record, so a group of N runs
at most N times. Errors that concern the transaction rather than one record (a deadlock, a lost
connection, a timeout) fail the whole group: nothing of it commits and `SharedTransactions` retries
a deadlock from the start.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import asyncpg

from paymanager.application.ledger_ops import SessionSettlement, record_session_settlements
from paymanager.application.sessions.store import SessionLegs, SessionStore
from paymanager.application.sessions.write_ahead import Locked, locked_of
from paymanager.db.pool import Conn, Pool
from paymanager.jobs import JobContext, PermanentError
from paymanager.jobs.batch import SharedTransactions
from paymanager.ledger import Ledger

# Errors of the shared transaction itself, not of one record: the whole group fails with them.
GROUP_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.DeadlockDetectedError,
    asyncpg.SerializationError,
    asyncpg.QueryCanceledError,
    asyncpg.InterfaceError,
    asyncpg.PostgresConnectionError,
    OSError,
)

# One record: what to write for its leg on the group's connection, given the leg's session and legs
# as the group holds them (locked), and the list its completion's ledger record goes to; it returns
# them as its writes left them, or None when it cannot say (they are then read again if needed).
Apply = Callable[[Conn, Locked, list[SessionSettlement]], Awaitable[Locked | None]]


@dataclass(frozen=True, slots=True)
class Record:
    leg_id: uuid.UUID
    apply: Apply


class _Refused(Exception):
    """The ledger refused the chains of these records (by index): they are dropped, the rest rerun."""

    def __init__(self, refused: list[tuple[int, Exception]]) -> None:
        super().__init__(f"{len(refused)} settlements refused")
        self.refused = refused


@dataclass(slots=True)
class _Run:
    """One pass over the pending records of a group, from the group's locking read."""

    conn: Conn
    ledger: Ledger
    read: dict[uuid.UUID, SessionLegs]  # by leg id, as the group's locking read found them
    current: int | None = None  # the record being applied: an exception now is its own
    settlements: list[tuple[int, SessionSettlement]] = field(default_factory=list)

    async def apply(self, records: list[Record], pending: list[int]) -> None:
        views: dict[uuid.UUID, SessionLegs | None] = {}  # by session id: as the last record left it
        for index in pending:
            self.current = index
            leg_id = records[index].leg_id
            session_id = self.read[leg_id].session.id
            view = views.get(session_id, self.read[leg_id])
            if view is None:  # an earlier record changed more than it said: read again (still locked)
                view = (await SessionStore(self.conn).lock_with_legs_of_legs(leg_ids=[leg_id]))[leg_id]
            locked = locked_of({leg_id: view}, leg_id)
            assert locked is not None, "the leg is one of its session's"
            mine: list[SessionSettlement] = []
            after = await records[index].apply(self.conn, locked, mine)
            self.settlements.extend((index, settlement) for settlement in mine)
            views[session_id] = SessionLegs(after.session, after.legs) if after is not None else None
        self.current = None
        if self.settlements:
            results = await record_session_settlements(
                self.ledger, self.conn, [settlement for _, settlement in self.settlements]
            )
            refused: list[tuple[int, Exception]] = [
                (index, error)
                for (index, _), error in zip(self.settlements, results, strict=True)
                if error is not None
            ]
            if refused:
                raise _Refused(refused)


async def apply_isolated(conn: Conn, ledger: Ledger, records: list[Record]) -> list[Exception | None]:
    """`records` on `conn`'s open transaction, the sessions locked first; per record, None or its own
    exception (nothing of a record that raised is written, and the others are)."""
    read = await SessionStore(conn).lock_with_legs_of_legs(leg_ids=[record.leg_id for record in records])
    outcomes: list[Exception | None] = [None] * len(records)
    pending: list[int] = []
    for index, record in enumerate(records):
        if record.leg_id in read:
            pending.append(index)
        else:
            outcomes[index] = PermanentError(f"checkout session leg {record.leg_id} does not exist")
    if len(records) == 1:
        # Alone, a record's failure is the group's: no savepoint needed to keep others' writes.
        if outcomes[0] is not None:
            raise outcomes[0]
        try:
            await _Run(conn, ledger, read).apply(records, pending)
        except _Refused as refused:
            raise refused.refused[0][1] from None
        return outcomes
    while pending:
        run = _Run(conn, ledger, read)
        try:
            async with conn.transaction():  # a savepoint inside the shared transaction
                await run.apply(records, pending)
            return outcomes
        except GROUP_ERRORS:
            raise
        except _Refused as refused:
            for index, error in refused.refused:
                outcomes[index] = error
                pending.remove(index)
        except Exception as exc:
            if run.current is None:
                raise  # the savepoint's own statements failed: not a record's fault
            outcomes[run.current] = exc
            pending.remove(run.current)
    return outcomes


class Recorder:
    """The outcomes of one worker's session actions, recorded in shared fenced transactions."""

    def __init__(self, pool: Pool, ledger: Ledger, *, batch_max: int, batches_in_flight_max: int) -> None:
        self._ledger = ledger
        self._shared: SharedTransactions[Record, None] = SharedTransactions(
            pool, self._group, batch_max=batch_max, batches_in_flight_max=batches_in_flight_max
        )

    async def _group(self, conn: Conn, items: list[tuple[JobContext, Record]]) -> list[Exception | None]:
        """The work of a shared transaction (jobs/batch.py): the group's records."""
        return await apply_isolated(conn, self._ledger, [record for _, record in items])

    async def record(self, ctx: JobContext, leg_id: uuid.UUID, apply: Apply) -> None:
        """Run `apply` for `leg_id` in a shared transaction that completes job `ctx`; raises its
        exception (nothing of it written), or `LeaseLostError` when the job's lease is gone."""
        await self._shared.run(ctx, Record(leg_id, apply))
