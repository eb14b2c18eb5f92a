"""The sessions API's use cases: create, get, confirm, cancel. Each runs on the caller's transaction."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from paymanager.application.accounts.store import AccountStore
from paymanager.application.ids import new_id
from paymanager.application.services.use_cases import ServiceIdentity
from paymanager.application.sessions import lifecycle
from paymanager.application.sessions.context import Sessions
from paymanager.application.sessions.store import Leg, NewLeg, NewSession, Session, SessionStore
from paymanager.db.pool import Conn
from paymanager.domain.channels import AccountKind
from paymanager.domain.errors import CurrencyMismatchError, InvalidInputError, NotFoundError
from paymanager.domain.money import currency
from paymanager.domain.sessions import (
    SESSION_ACTIVE,
    LegRequest,
    SessionExpiredError,
    SessionStatus,
    check_legs,
    session_fee,
    session_transition,
)


@dataclass(frozen=True, slots=True)
class SessionRequest:
    merchant_account_id: uuid.UUID
    amount: int
    currency: str
    legs: list[LegRequest]
    # Exactly one of the two, or neither (the default TTL).
    expires_at: datetime | None = None
    ttl_sec: int | None = None
    metadata: dict[str, object] = field(default_factory=dict)


def _expiry(sessions: Sessions, request: SessionRequest, now: datetime) -> datetime:
    settings = sessions.payments.settings
    if request.expires_at is not None and request.ttl_sec is not None:
        raise InvalidInputError("give expires_at or ttl_sec, not both", {"field": "expires_at"})
    if request.expires_at is not None:
        if request.expires_at.tzinfo is None:
            raise InvalidInputError("expires_at needs a time zone", {"field": "expires_at"})
        ttl = (request.expires_at - now).total_seconds()
    else:
        ttl = request.ttl_sec if request.ttl_sec is not None else settings.session_default_ttl_sec
    if not 0 < ttl <= settings.session_max_ttl_sec:
        raise InvalidInputError(
            f"a session expires within (0, {settings.session_max_ttl_sec}] seconds from now",
            {"field": "expires_at" if request.expires_at is not None else "ttl_sec", "ttl_sec": ttl},
        )
    return request.expires_at or now + timedelta(seconds=ttl)


async def create_session(
    sessions: Sessions, conn: Conn, caller: ServiceIdentity, request: SessionRequest
) -> tuple[Session, list[Leg]]:
    """A new open session of the caller's merchant account; its legs must sum to the amount."""
    currency(request.currency)
    check_legs(request.amount, request.legs)
    now = sessions.payments.clock()
    expires_at = _expiry(sessions, request, now)
    account = await AccountStore(conn).get(account_id=request.merchant_account_id)
    if account is None or account.owner_service_id != caller.id:
        raise NotFoundError(
            "no such merchant account", {"merchant_account_id": str(request.merchant_account_id)}
        )
    if account.kind is not AccountKind.MERCHANT:
        raise InvalidInputError(
            "a checkout session pays a merchant account", {"merchant_account_id": str(account.id)}
        )
    if account.currency != request.currency:
        raise CurrencyMismatchError(
            "the session's currency differs from the merchant account's",
            {"account_currency": account.currency, "currency": request.currency},
        )
    new = NewSession(
        new_id(), caller.id, account.id, request.amount, session_fee(request.amount), request.currency,
        request.metadata, now, expires_at,
    )  # fmt: skip
    legs = [
        NewLeg(new_id(), index, leg.kind, leg.amount, leg.instrument)
        for index, leg in enumerate(request.legs)
    ]
    return await SessionStore(conn).insert(new=new, legs=legs)


async def get_session(
    conn: Conn, caller: ServiceIdentity, session_id: uuid.UUID, *, lock: bool = False
) -> tuple[Session, list[Leg]]:
    store = SessionStore(conn)
    session = await store.get(session_id=session_id, lock=lock)
    if session is None or session.service_id != caller.id:
        raise NotFoundError("no such checkout session", {"session_id": str(session_id)})
    return session, await store.legs(session_id=session_id)


async def confirm_session(
    sessions: Sessions, conn: Conn, caller: ServiceIdentity, session_id: uuid.UUID
) -> tuple[Session, list[Leg]]:
    """Start the session's actions. Under the row lock, confirm and the expiry exclude each other: a
    session past its expiry is expired here (committed; the caller answers with the returned status)
    and no action is enqueued."""
    session, legs = await get_session(conn, caller, session_id, lock=True)
    if session.status is SessionStatus.OPEN and sessions.payments.clock() >= session.expires_at:
        ended, _ = await lifecycle.end(
            sessions, conn, session, legs, SessionStatus.EXPIRED, "the session expired"
        )
        return ended, await SessionStore(conn).legs(session_id=session_id)
    if session.status is SessionStatus.EXPIRED:
        raise SessionExpiredError("the checkout session expired", {"session_id": str(session_id)})
    session_transition(session.status, SessionStatus.PROCESSING)
    return await lifecycle.begin(sessions, conn, session, legs), legs


async def cancel_session(
    sessions: Sessions, conn: Conn, caller: ServiceIdentity, session_id: uuid.UUID
) -> tuple[Session, list[Leg]]:
    """End an open or processing session; whatever its legs moved is compensated."""
    session, legs = await get_session(conn, caller, session_id, lock=True)
    if session.status not in SESSION_ACTIVE:
        session_transition(session.status, SessionStatus.CANCELLED)  # raises: a finished session
    ended, _ = await lifecycle.end(
        sessions, conn, session, legs, SessionStatus.CANCELLED, "cancelled by the merchant"
    )
    return ended, await SessionStore(conn).legs(session_id=session_id)
