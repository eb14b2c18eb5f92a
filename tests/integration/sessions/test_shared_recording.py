"""The steps of many session actions in one transaction each: the write-ahead marks only the legs
whose action applies (a missing leg fails alone); a record that fails is undone alone (the others
commit), an error of the transaction itself fails the whole group; and sessions confirmed together
all complete once, with the ledger paying the merchant for each."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import asyncpg
import pytest

from paymanager.application.ledger_ops import SessionSettlement
from paymanager.application.sessions.recording import Apply, Record, apply_isolated
from paymanager.application.sessions.store import SessionStore
from paymanager.application.sessions.write_ahead import Locked, write_ahead
from paymanager.db.pool import Conn
from tests.integration.sessions.conftest import Env


async def _open_legs(env: Env, count: int) -> list[uuid.UUID]:
    """The gift legs of `count` open sessions (never confirmed: no action runs for them)."""
    legs = []
    for index in range(count):
        session = await env.create([("gift_card", f"GC-REC-{index}", 500), ("card", f"tok_rec_{index}", 500)])
        legs.append(uuid.UUID(session["legs"][0]["id"]))
    return legs


NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _mark(*, then_raise: Exception | None = None) -> Apply:
    """A record that writes its leg's `attempted_at`, then raises `then_raise` if given."""

    async def apply(conn: Conn, locked: Locked, settlements: list[SessionSettlement]) -> Locked | None:
        await SessionStore(conn).mark_attempted(leg_id=locked.leg.id, now=NOW)
        if then_raise is not None:
            raise then_raise
        return None

    return apply


async def _attempted(env: Env, legs: list[uuid.UUID]) -> list[bool]:
    rows = await env.pool.fetch(
        "SELECT id, attempted_at IS NOT NULL AS attempted FROM checkout_session_leg WHERE id = ANY($1)", legs
    )
    found = {row["id"]: row["attempted"] for row in rows}
    return [found[leg] for leg in legs]


async def test_the_write_ahead_marks_the_legs_whose_action_applies_and_fails_a_missing_leg_alone(
    env: Env,
) -> None:
    legs = await _open_legs(env, 2)
    missing = uuid.uuid4()

    def applies(locked: Locked) -> bool:
        return locked.leg.id == legs[0]

    async with env.pool.acquire() as conn, conn.transaction():
        outcomes = await write_ahead(conn, [(legs[0], applies), (legs[1], applies), (missing, applies)], NOW)
    first, second, third = outcomes
    assert isinstance(first, Locked)
    assert first.leg.id == legs[0]
    assert [leg.kind.value for leg in first.legs] == ["gift_card", "card"]  # its session's legs, in order
    assert first.session.status.value == "open"
    assert second is None
    assert isinstance(third, Exception)
    assert await _attempted(env, legs) == [True, False]


async def test_a_failing_record_is_undone_alone_and_the_others_commit(env: Env) -> None:
    legs = await _open_legs(env, 3)
    boom = RuntimeError("this record fails")
    records = [
        Record(legs[0], _mark()),
        Record(legs[1], _mark(then_raise=boom)),
        Record(legs[2], _mark()),
    ]
    async with env.pool.acquire() as conn, conn.transaction():
        outcomes = await apply_isolated(conn, env.sessions.payments.ledger, records)
    assert outcomes == [None, boom, None]
    assert await _attempted(env, legs) == [True, False, True]


async def test_every_record_failing_leaves_nothing_written(env: Env) -> None:
    legs = await _open_legs(env, 2)
    records = [Record(leg, _mark(then_raise=ValueError(f"fails {leg}"))) for leg in legs]
    async with env.pool.acquire() as conn, conn.transaction():
        outcomes = await apply_isolated(conn, env.sessions.payments.ledger, records)
    assert all(isinstance(outcome, ValueError) for outcome in outcomes)
    assert await _attempted(env, legs) == [False, False]


async def test_an_error_of_the_transaction_itself_fails_the_whole_group(env: Env) -> None:
    legs = await _open_legs(env, 2)

    async def times_out(conn: Conn, locked: Locked, settlements: list[SessionSettlement]) -> Locked | None:
        await SessionStore(conn).mark_attempted(leg_id=locked.leg.id, now=NOW)
        await conn.execute("SET LOCAL statement_timeout = 1")
        await conn.execute("SELECT pg_sleep(1)")
        return None

    records = [Record(legs[0], _mark()), Record(legs[1], times_out)]
    with pytest.raises(asyncpg.QueryCanceledError):
        async with env.pool.acquire() as conn, conn.transaction():
            await apply_isolated(conn, env.sessions.payments.ledger, records)
    assert await _attempted(env, legs) == [False, False]


async def test_sessions_confirmed_together_each_complete_once_and_pay_the_merchant(env: Env) -> None:
    count = 12
    await env.giftcards.cards(*[(f"GC-TOG-{i}", 1_000) for i in range(count)])
    sessions = [
        await env.create([("gift_card", f"GC-TOG-{i}", 400), ("card", f"tok_tog_{i}", 600)])
        for i in range(count)
    ]
    for session in sessions:
        assert (await env.confirm(session["id"])).status_code == 200
    for session in sessions:
        await env.wait_status(session["id"], "completed")
        await env.wait_leg(session["id"], 1, "captured")
    await env.wait_actions_done()
    response = await env.shop.get(f"/accounts/{env.merchant}/balance")
    assert response.json()["posted"] == sum(1_000 - s["fee"] for s in sessions)
    counters = await env.giftcards.counters()
    assert all(counters[f"GC-TOG-{i}"]["debits_applied"] == 1 for i in range(count))
    for session in sessions:
        assert await env.events(session["id"]) == ["session.completed"]
    # Three actions per session (debit, authorisation, capture), each completed once.
    jobs = await env.pool.fetch("SELECT kind, state FROM job WHERE queue = 'session-actions'")
    assert len(jobs) == 3 * count
    assert {job["state"] for job in jobs} == {"completed"}
