"""Step 1 of the session actions, for many legs at once: the check and the write-ahead, in one commit.

Before an action calls its provider, its leg's `attempted_at` is committed under the session's lock,
if the action still applies (actions.py). The actions a worker starts at once do this together: ONE
transaction locks their sessions in id order (the order every group takes them) in one statement,
reads all their legs in a second, checks each action, marks every leg that goes ahead in a third and
commits; each caller then gets its session and leg, or None when its action no longer applies.
The guarantee is the single action's: nothing is called before its leg's mark is committed, and a
session that ended first (the lock decides) makes its actions not apply.

The grouping is `paymanager.jobs.batch.GroupRunner`'s: a group starts on the loop's next turn (the
actions one claim started join it), at most `batch_max` legs each and `batches_in_flight_max` at
once. An error of the group's transaction reaches every caller of the group (nothing of it
committed, no call made); a leg that does not exist fails its caller alone.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from paymanager.application.sessions.store import Leg, Session, SessionLegs, SessionStore
from paymanager.db.pool import Conn, Pool
from paymanager.jobs import PermanentError
from paymanager.jobs.batch import GroupRunner


@dataclass(frozen=True, slots=True)
class Locked:
    """A session and its legs as read under the session's lock, and the leg an action is about."""

    session: Session
    legs: list[Leg]
    leg: Leg

    def replaced(self, leg: Leg) -> list[Leg]:
        return [leg if other.id == leg.id else other for other in self.legs]

    def moved(self, leg: Leg) -> Locked:
        """The view after `leg` (one of the session's) changed."""
        return Locked(self.session, self.replaced(leg), leg)


def locked_of(found: dict[uuid.UUID, SessionLegs], leg_id: uuid.UUID) -> Locked | None:
    """The view of `leg_id` in a read of sessions with their legs; None when the leg was not found."""
    read = found.get(leg_id)
    if read is None:
        return None
    return Locked(read.session, read.legs, next(leg for leg in read.legs if leg.id == leg_id))


Applies = Callable[[Locked], bool]


async def write_ahead(
    conn: Conn, requests: list[tuple[uuid.UUID, Applies]], now: datetime
) -> list[Locked | Exception | None]:
    """On `conn`'s open transaction: per request, its locked view when its action applies (its leg
    then marked attempted at `now`), None when it does not, or the error of a leg that is missing."""
    store = SessionStore(conn)
    found = await store.lock_with_legs_of_legs(leg_ids=[leg_id for leg_id, _ in requests])
    outcomes: list[Locked | Exception | None] = []
    marked: list[uuid.UUID] = []
    for leg_id, applies in requests:
        locked = locked_of(found, leg_id)
        if locked is None:
            outcomes.append(PermanentError(f"checkout session leg {leg_id} does not exist"))
        elif applies(locked):
            marked.append(leg_id)
            outcomes.append(locked)
        else:
            outcomes.append(None)
    if marked:
        await store.mark_attempted_many(leg_ids=marked, now=now)
    return outcomes


class WriteAheads:
    """Groups the write-ahead of the actions one worker runs at once (see the module's doc)."""

    def __init__(
        self, pool: Pool, clock: Callable[[], datetime], *, batch_max: int, batches_in_flight_max: int
    ) -> None:
        self._pool = pool
        self._clock = clock
        self._groups: GroupRunner[tuple[uuid.UUID, Applies], Locked | None] = GroupRunner(
            self._run, batch_max=batch_max, batches_in_flight_max=batches_in_flight_max
        )

    async def prepare(self, leg_id: uuid.UUID, applies: Applies) -> Locked | None:
        """The locked view of `leg_id` with its mark committed when the action applies, else None."""
        return await self._groups.submit((leg_id, applies))

    async def _run(self, group: list[tuple[uuid.UUID, Applies]]) -> list[Locked | Exception | None]:
        async with self._pool.acquire() as conn, conn.transaction():
            return await write_ahead(conn, group, self._clock())
