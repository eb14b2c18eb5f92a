"""The checkout-session store: the only reader of `sessions.sql`; rows in, frozen values out."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from paymanager.db.pool import Conn
from paymanager.db.sql import load_queries
from paymanager.domain.sessions import LegKind, LegStatus, SessionStatus

Q = load_queries("paymanager.application.sessions", "sessions.sql")


@dataclass(frozen=True, slots=True)
class Session:
    """One row of `checkout_session`."""

    id: uuid.UUID
    service_id: str
    merchant_account_id: uuid.UUID
    status: SessionStatus
    amount: int
    fee: int
    currency: str
    version: int
    failure_reason: str | None
    metadata: dict[str, object]
    created_at: datetime
    updated_at: datetime
    expires_at: datetime
    confirmed_at: datetime | None
    finished_at: datetime | None

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> Session:
        return cls(
            id=row["id"],
            service_id=row["service_id"],
            merchant_account_id=row["merchant_account_id"],
            status=SessionStatus(row["status"]),
            amount=row["amount"],
            fee=row["fee"],
            currency=row["currency"],
            version=row["version"],
            failure_reason=row["failure_reason"],
            metadata=row["metadata"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            expires_at=row["expires_at"],
            confirmed_at=row["confirmed_at"],
            finished_at=row["finished_at"],
        )


@dataclass(frozen=True, slots=True)
class Leg:
    """One row of `checkout_session_leg`."""

    id: uuid.UUID
    session_id: uuid.UUID
    position: int
    kind: LegKind
    status: LegStatus
    amount: int
    instrument: str
    attempted_at: datetime | None
    provider_ref: str | None
    failure_reason: str | None
    updated_at: datetime

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> Leg:
        return cls(
            id=row["id"],
            session_id=row["session_id"],
            position=row["position"],
            kind=LegKind(row["kind"]),
            status=LegStatus(row["status"]),
            amount=row["amount"],
            instrument=row["instrument"],
            attempted_at=row["attempted_at"],
            provider_ref=row["provider_ref"],
            failure_reason=row["failure_reason"],
            updated_at=row["updated_at"],
        )

    @classmethod
    def from_joined_row(cls, row: asyncpg.Record) -> Leg:
        """A leg from a row that joined it to its session (its columns named leg_*)."""
        return cls(
            id=row["leg_id"],
            session_id=row["leg_session_id"],
            position=row["leg_position"],
            kind=LegKind(row["leg_kind"]),
            status=LegStatus(row["leg_status"]),
            amount=row["leg_amount"],
            instrument=row["leg_instrument"],
            attempted_at=row["leg_attempted_at"],
            provider_ref=row["leg_provider_ref"],
            failure_reason=row["leg_failure_reason"],
            updated_at=row["leg_updated_at"],
        )


@dataclass(frozen=True, slots=True)
class SessionLegs:
    """A session and its legs in position order, as one statement read them."""

    session: Session
    legs: list[Leg]


def _by_leg(rows: list[asyncpg.Record]) -> dict[uuid.UUID, SessionLegs]:
    """Rows of a session joined to a leg, ordered by session then position -> each leg's id to its
    session's."""
    found: dict[uuid.UUID, SessionLegs] = {}
    current: SessionLegs | None = None
    for row in rows:
        leg = Leg.from_joined_row(row)
        if current is None or current.session.id != leg.session_id:
            current = SessionLegs(Session.from_row(row), [])
        current.legs.append(leg)
        found[leg.id] = current
    return found


@dataclass(frozen=True, slots=True)
class NewSession:
    id: uuid.UUID
    service_id: str
    merchant_account_id: uuid.UUID
    amount: int
    fee: int
    currency: str
    metadata: dict[str, object]
    now: datetime
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class NewLeg:
    id: uuid.UUID
    position: int
    kind: LegKind
    amount: int
    instrument: str


@dataclass(frozen=True, slots=True)
class SessionEvent:
    """One row of `checkout_session_event`: a merchant webhook to deliver."""

    id: uuid.UUID
    session_id: uuid.UUID
    service_id: str
    type: str
    payload: dict[str, object]
    created_at: datetime

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> SessionEvent:
        return cls(
            id=row["id"],
            session_id=row["session_id"],
            service_id=row["service_id"],
            type=row["type"],
            payload=row["payload"],
            created_at=row["created_at"],
        )


class SessionStore:
    __slots__ = ("_conn",)

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    async def insert(self, *, new: NewSession, legs: list[NewLeg]) -> tuple[Session, list[Leg]]:
        row = await self._conn.fetchrow(
            Q["session_insert"], new.id, new.service_id, new.merchant_account_id, new.amount, new.fee,
            new.currency, new.metadata, new.now, new.expires_at,
        )  # fmt: skip
        assert row is not None, "an INSERT ... RETURNING returns its row"
        rows = await self._conn.fetch(
            Q["leg_insert_many"], new.id, new.now, [leg.id for leg in legs], [leg.position for leg in legs],
            [leg.kind.value for leg in legs], [leg.amount for leg in legs], [leg.instrument for leg in legs],
        )  # fmt: skip
        return Session.from_row(row), sorted((Leg.from_row(r) for r in rows), key=lambda leg: leg.position)

    async def get(self, *, session_id: uuid.UUID, lock: bool = False) -> Session | None:
        row = await self._conn.fetchrow(Q["session_lock" if lock else "session_get"], session_id)
        return Session.from_row(row) if row is not None else None

    async def lock_of_leg(self, *, leg_id: uuid.UUID) -> Session | None:
        row = await self._conn.fetchrow(Q["session_lock_of_leg"], leg_id)
        return Session.from_row(row) if row is not None else None

    async def of_leg(self, *, leg_id: uuid.UUID) -> Session | None:
        row = await self._conn.fetchrow(Q["session_of_leg"], leg_id)
        return Session.from_row(row) if row is not None else None

    async def lock_of_legs(self, *, leg_ids: list[uuid.UUID]) -> list[Session]:
        """Lock the sessions of `leg_ids` in id order (a group's locks, taken before its work)."""
        return [Session.from_row(row) for row in await self._conn.fetch(Q["session_lock_of_legs"], leg_ids)]

    async def lock_with_legs_of_legs(self, *, leg_ids: list[uuid.UUID]) -> dict[uuid.UUID, SessionLegs]:
        """Lock the sessions of `leg_ids` in id order, then read their legs; by leg id, for every leg
        of those sessions (a leg that does not exist is absent). Two statements: the legs are read
        after the locks are held, so they are as the last holder of a lock left them."""
        sessions = {s.id: s for s in await self.lock_of_legs(leg_ids=leg_ids)}
        found: dict[uuid.UUID, SessionLegs] = {}
        read: SessionLegs | None = None
        for leg in await self.legs_of_sessions(session_ids=list(sessions)):
            if read is None or read.session.id != leg.session_id:
                read = SessionLegs(sessions[leg.session_id], [])
            read.legs.append(leg)
            found[leg.id] = read
        return found

    async def with_legs_of_legs(self, *, leg_ids: list[uuid.UUID]) -> dict[uuid.UUID, SessionLegs]:
        """The sessions of `leg_ids` with their legs, not locked, in ONE statement; by leg id."""
        return _by_leg(await self._conn.fetch(Q["session_legs_of_legs"], leg_ids))

    async def legs_of_sessions(self, *, session_ids: list[uuid.UUID]) -> list[Leg]:
        return [Leg.from_row(row) for row in await self._conn.fetch(Q["legs_of_sessions"], session_ids)]

    async def mark_attempted_many(self, *, leg_ids: list[uuid.UUID], now: datetime) -> None:
        await self._conn.execute(Q["leg_mark_attempted_many"], leg_ids, now)

    async def legs(self, *, session_id: uuid.UUID) -> list[Leg]:
        return [Leg.from_row(row) for row in await self._conn.fetch(Q["legs_of_session"], session_id)]

    async def set_status(
        self,
        *,
        session_id: uuid.UUID,
        status: SessionStatus,
        from_status: SessionStatus,
        now: datetime,
        reason: str | None = None,
    ) -> Session | None:
        row = await self._conn.fetchrow(
            Q["session_set_status"], session_id, status.value, from_status.value, now, reason
        )
        return Session.from_row(row) if row is not None else None

    async def lock_due(self, *, now: datetime, limit: int) -> list[Session]:
        return [Session.from_row(row) for row in await self._conn.fetch(Q["session_lock_due"], now, limit)]

    async def set_leg_status(
        self,
        *,
        leg_id: uuid.UUID,
        status: LegStatus,
        from_status: LegStatus,
        now: datetime,
        provider_ref: str | None = None,
        reason: str | None = None,
    ) -> Leg | None:
        row = await self._conn.fetchrow(
            Q["leg_set_status"], leg_id, status.value, from_status.value, now, provider_ref, reason
        )
        return Leg.from_row(row) if row is not None else None

    async def mark_attempted(self, *, leg_id: uuid.UUID, now: datetime) -> None:
        await self._conn.execute(Q["leg_mark_attempted"], leg_id, now)

    async def insert_event(
        self,
        *,
        event_id: uuid.UUID,
        session: Session,
        type_: str,
        payload: dict[str, object],
        now: datetime,
    ) -> bool:
        """True when the event was written; False when the session already had one of that type."""
        found = await self._conn.fetchval(
            Q["session_event_insert"], event_id, session.id, session.service_id, type_, payload, now
        )
        return found is not None

    async def events(self, *, session_id: uuid.UUID) -> list[SessionEvent]:
        return [
            SessionEvent.from_row(r)
            for r in await self._conn.fetch(Q["session_events_of_session"], session_id)
        ]
