"""The schema enforces the same session and leg state machines as the code: every pair of statuses
is tried against the real triggers and CHECKs."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from paymanager.application.services.use_cases import create_service
from paymanager.db.pool import Conn
from paymanager.domain.sessions import (
    LEG_STATUSES,
    LEG_TRANSITIONS,
    SESSION_TRANSITIONS,
    LegKind,
    SessionStatus,
)
from tests.integration.payments.conftest import build_components

NOW = datetime(2026, 1, 1, tzinfo=UTC)


async def _session_row(conn: Conn, service_id: str, account_id: uuid.UUID, status: str) -> uuid.UUID:
    session_id = uuid.uuid4()
    finished = NOW if status in {"completed", "failed", "cancelled", "expired"} else None
    confirmed = NOW if status in {"processing", "completed", "failed"} else None
    await conn.execute(
        "INSERT INTO checkout_session (id, service_id, merchant_account_id, status, amount, fee, currency,"
        " created_at, updated_at, expires_at, confirmed_at, finished_at)"
        " VALUES ($1, $2, $3, $4, 100, 1, 'THB', $5, $5, $6, $7, $8)",
        session_id, service_id, account_id, status, NOW, NOW + timedelta(hours=1), confirmed, finished,
    )  # fmt: skip
    return session_id


async def test_the_triggers_draw_the_same_edges_as_the_code(pool: asyncpg.Pool, database_url: str) -> None:
    components = await build_components(pool, database_url)
    async with pool.acquire() as conn:
        service, _ = await create_service(conn, components.payments.box, "schema", admin=False)
        account_id = uuid.uuid4()
        await conn.execute(
            "INSERT INTO account (id, kind, currency, owner_service_id) VALUES ($1, 'merchant', 'THB', $2)",
            account_id, service.id,
        )  # fmt: skip
        for current in SessionStatus:
            for target in SessionStatus:
                if current is target:
                    continue
                session_id = await _session_row(conn, service.id, account_id, current.value)
                allowed = target in SESSION_TRANSITIONS.get(current, frozenset())
                finished = NOW if target.value in {"completed", "failed", "cancelled", "expired"} else None
                statement = (
                    "UPDATE checkout_session SET status = $2, version = version + 1, finished_at = $3,"
                    " confirmed_at = coalesce(confirmed_at, $4) WHERE id = $1"
                )
                if allowed:
                    await conn.execute(statement, session_id, target.value, finished, NOW)
                else:
                    with pytest.raises(asyncpg.CheckViolationError):
                        await conn.execute(statement, session_id, target.value, finished, NOW)
        session_id = await _session_row(conn, service.id, account_id, "open")
        for kind in LegKind:
            for leg_from in LEG_STATUSES[kind]:
                for leg_to in LEG_STATUSES[kind] - {leg_from}:
                    leg_id = uuid.uuid4()
                    await conn.execute(
                        "INSERT INTO checkout_session_leg (id, session_id, position, kind, status, amount,"
                        " instrument, updated_at) VALUES ($1, $2, 0, $3, $4, 10, 'x', $5)",
                        leg_id, session_id, kind.value, leg_from.value, NOW,
                    )  # fmt: skip
                    statement = "UPDATE checkout_session_leg SET status = $2 WHERE id = $1"
                    if leg_to in LEG_TRANSITIONS[kind].get(leg_from, frozenset()):
                        await conn.execute(statement, leg_id, leg_to.value)
                    else:
                        with pytest.raises(asyncpg.CheckViolationError):
                            await conn.execute(statement, leg_id, leg_to.value)
                    await conn.execute("DELETE FROM checkout_session_leg WHERE id = $1", leg_id)


async def test_a_status_change_without_a_version_bump_is_refused(
    pool: asyncpg.Pool, database_url: str
) -> None:
    components = await build_components(pool, database_url)
    async with pool.acquire() as conn:
        service, _ = await create_service(conn, components.payments.box, "schema2", admin=False)
        account_id = uuid.uuid4()
        await conn.execute(
            "INSERT INTO account (id, kind, currency, owner_service_id) VALUES ($1, 'merchant', 'THB', $2)",
            account_id, service.id,
        )  # fmt: skip
        session_id = await _session_row(conn, service.id, account_id, "open")
        with pytest.raises(asyncpg.CheckViolationError):
            await conn.execute(
                "UPDATE checkout_session SET status = 'cancelled', finished_at = $2 WHERE id = $1",
                session_id,
                NOW,
            )
        # A second card leg on one session is refused by the schema too.
        for position in (0, 1):
            statement = (
                "INSERT INTO checkout_session_leg (id, session_id, position, kind, amount, instrument,"
                " updated_at) VALUES ($1, $2, $3, 'card', 10, 'tok', $4)"
            )
            if position == 0:
                await conn.execute(statement, uuid.uuid4(), session_id, position, NOW)
            else:
                with pytest.raises(asyncpg.UniqueViolationError):
                    await conn.execute(statement, uuid.uuid4(), session_id, position, NOW)
