"""Step 1 of the session actions, for many legs at once: the check and the write-ahead, in one commit.

Before an action calls its provider, its leg's `attempted_at` is committed under the session's lock,
if the action still applies (actions.py). The actions a worker starts at once do this together: ONE
transaction locks their sessions in id order (the order every group takes them), reads all their
legs in one statement, checks each action, marks every leg that goes ahead in one statement and
commits; each caller then gets its session and leg, or None when its action no longer applies. The
guarantee is the single action's: nothing is called before its leg's mark is committed, and a
session that ended first (the lock decides) makes its actions not apply.

A group is started on the loop's next turn (the actions one claim started join it), at most
`batch_max` legs each and `batches_in_flight_max` at once; while the limit is reached, new requests
wait and join the next group. An error of the group's transaction reaches every caller of the group
(nothing of it committed, no call made); a leg that does not exist fails its caller alone.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from paymanager.application.sessions.store import Leg, Session, SessionStore
from paymanager.db.pool import Conn, Pool
from paymanager.jobs import PermanentError


@dataclass(frozen=True, slots=True)
class Locked:
    """A session and its legs as read under the session's lock, and the leg an action is about."""

    session: Session
    legs: list[Leg]
    leg: Leg

    def replaced(self, leg: Leg) -> list[Leg]:
        return [leg if other.id == leg.id else other for other in self.legs]


Applies = Callable[[Locked], bool]


@dataclass(eq=False, slots=True)
class _Request:
    leg_id: uuid.UUID
    applies: Applies
    outcome: asyncio.Future[Locked | None]


async def write_ahead(
    conn: Conn, requests: list[tuple[uuid.UUID, Applies]], now: datetime
) -> list[Locked | Exception | None]:
    """On `conn`'s open transaction: per request, its locked view when its action applies (its leg
    then marked attempted at `now`), None when it does not, or the error of a leg that is missing."""
    store = SessionStore(conn)
    sessions = {s.id: s for s in await store.lock_of_legs(leg_ids=[leg_id for leg_id, _ in requests])}
    legs_by_session: dict[uuid.UUID, list[Leg]] = {}
    for leg in await store.legs_of_sessions(session_ids=list(sessions)):
        legs_by_session.setdefault(leg.session_id, []).append(leg)
    by_id = {leg.id: leg for legs in legs_by_session.values() for leg in legs}
    outcomes: list[Locked | Exception | None] = []
    marked: list[uuid.UUID] = []
    for leg_id, applies in requests:
        found = by_id.get(leg_id)
        if found is None:
            outcomes.append(PermanentError(f"checkout session leg {leg_id} does not exist"))
            continue
        locked = Locked(sessions[found.session_id], legs_by_session[found.session_id], found)
        if applies(locked):
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
        self._batch_max = batch_max
        self._batches_in_flight_max = batches_in_flight_max
        self._batches_in_flight = 0
        self._waiting: deque[_Request] = deque()
        self._tasks: set[asyncio.Task[None]] = set()

    async def prepare(self, leg_id: uuid.UUID, applies: Applies) -> Locked | None:
        """The locked view of `leg_id` with its mark committed when the action applies, else None."""
        loop = asyncio.get_running_loop()
        request = _Request(leg_id, applies, loop.create_future())
        self._waiting.append(request)
        loop.call_soon(self._start_batches)
        return await request.outcome

    def _start_batches(self) -> None:
        while self._waiting and self._batches_in_flight < self._batches_in_flight_max:
            group: list[_Request] = []
            while self._waiting and len(group) < self._batch_max:
                request = self._waiting.popleft()
                if not request.outcome.done():  # a caller cancelled while waiting is dropped
                    group.append(request)
            if not group:
                return
            self._batches_in_flight += 1
            task = asyncio.create_task(self._run(group))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, group: list[_Request]) -> None:
        try:
            async with self._pool.acquire() as conn, conn.transaction():
                outcomes = await write_ahead(conn, [(r.leg_id, r.applies) for r in group], self._clock())
        except Exception as exc:
            for request in group:
                if not request.outcome.done():
                    request.outcome.set_exception(exc)
        except BaseException:
            for request in group:
                request.outcome.cancel()
            raise
        else:
            for request, outcome in zip(group, outcomes, strict=True):
                if request.outcome.done():
                    continue
                if isinstance(outcome, Exception):
                    request.outcome.set_exception(outcome)
                else:
                    request.outcome.set_result(outcome)
        finally:
            self._batches_in_flight -= 1
            self._start_batches()
