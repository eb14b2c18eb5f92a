"""The JSON shape of a checkout session, for the API and for the merchant's webhooks."""

from __future__ import annotations

from typing import TypeAlias

from paymanager.application.sessions.store import Leg, Session

JsonObject: TypeAlias = dict[str, object]


def _masked(instrument: str) -> str:
    """A card number or token shown by its last four characters only."""
    return ("*" * max(0, len(instrument) - 4)) + instrument[-4:]


def leg_view(leg: Leg) -> JsonObject:
    return {
        "id": str(leg.id),
        "kind": leg.kind.value,
        "status": leg.status.value,
        "amount": leg.amount,
        "card": _masked(leg.instrument),
        "failure_reason": leg.failure_reason,
    }


def session_view(session: Session, legs: list[Leg]) -> JsonObject:
    return {
        "id": str(session.id),
        "object": "checkout_session",
        "status": session.status.value,
        "merchant_account_id": str(session.merchant_account_id),
        "amount": session.amount,
        "fee": session.fee,
        "currency": session.currency,
        "version": session.version,
        "failure_reason": session.failure_reason,
        "metadata": session.metadata,
        "created_at": session.created_at.isoformat(),
        "updated_at": session.updated_at.isoformat(),
        "expires_at": session.expires_at.isoformat(),
        "confirmed_at": session.confirmed_at.isoformat() if session.confirmed_at else None,
        "finished_at": session.finished_at.isoformat() if session.finished_at else None,
        "legs": [leg_view(leg) for leg in legs],
    }
