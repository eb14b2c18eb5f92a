"""The schema enforces the psp_tx state machine as the domain draws it (domain/psp.py)."""

from __future__ import annotations

import uuid

import asyncpg
import pytest

from paymanager.application.ids import new_id
from paymanager.domain.psp import PspState, can_transition

SERVICE = "svc_" + "0" * 32


async def test_the_schema_refuses_what_the_domain_refuses(conn: asyncpg.Connection) -> None:
    intent_id = await _an_intent(conn)
    update = (
        "UPDATE psp_tx SET state = $2, version = version + 1,"
        " finished_at = CASE WHEN $2 IN ('COMPLETED', 'FAILED') THEN now() END WHERE id = $1"
    )
    checked = 0
    for current in PspState:
        for target in PspState:
            if current is target:
                continue
            async with conn.transaction():
                tx_id = uuid.uuid4()
                await conn.execute(
                    "INSERT INTO psp_tx (id, intent_id, psp, state, amount, currency, beneficiary,"
                    " idempotency_key, query_ref, finished_at) VALUES ($1, $2, 'ipps', $3, 100, 'THB', '123',"
                    " $4, 'q', CASE WHEN $3 IN ('COMPLETED', 'FAILED') THEN now() END)",
                    tx_id, intent_id, current.value, uuid.uuid4(),
                )  # fmt: skip
                if can_transition(current, target):
                    await conn.execute(update, tx_id, target.value)
                else:
                    with pytest.raises(asyncpg.CheckViolationError, match="cannot go"):
                        async with conn.transaction():
                            await conn.execute(update, tx_id, target.value)
                await conn.execute("DELETE FROM psp_tx WHERE id = $1", tx_id)
                checked += 1
    assert checked == len(PspState) * (len(PspState) - 1)


async def test_a_state_change_must_raise_the_version(conn: asyncpg.Connection) -> None:
    intent_id = await _an_intent(conn)
    tx_id = uuid.uuid4()
    await conn.execute(
        "INSERT INTO psp_tx (id, intent_id, psp, amount, currency, beneficiary, idempotency_key)"
        " VALUES ($1, $2, 'ipps', 100, 'THB', '123', $3)",
        tx_id, intent_id, uuid.uuid4(),
    )  # fmt: skip
    with pytest.raises(asyncpg.CheckViolationError, match="version"):
        await conn.execute("UPDATE psp_tx SET state = 'QUERY_PENDING' WHERE id = $1", tx_id)


async def _an_intent(conn: asyncpg.Connection) -> uuid.UUID:
    await conn.execute(
        "INSERT INTO service (id, name, secret_ciphertext, secret_key_id) VALUES ($1, 's', '', 'k')"
        " ON CONFLICT DO NOTHING",
        SERVICE,
    )
    accounts = [uuid.uuid4(), uuid.uuid4()]
    for account in accounts:
        await conn.execute(
            "INSERT INTO account (id, kind, currency, owner_service_id) VALUES ($1, 'user', 'THB', $2)",
            account, SERVICE,
        )  # fmt: skip
    intent_id = new_id()  # UUIDv7: intents are partitioned by the time their id carries
    await conn.execute(
        "INSERT INTO intent (id, service_id, channel, status, amount, fee, currency, payer_account_id,"
        " payee_account_id, created_at, updated_at)"
        " VALUES ($1, $2, 'ipps-transfer', 'created', 100, 0, 'THB', $3, $4, now(), now())",
        intent_id, SERVICE, *accounts,
    )  # fmt: skip
    return intent_id
