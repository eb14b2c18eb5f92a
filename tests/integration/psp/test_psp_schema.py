"""The schema enforces the psp_tx state machine as the domain draws it (domain/psp.py)."""

from __future__ import annotations

import uuid

import asyncpg
import pytest

from paymanager.application.ids import new_id
from paymanager.db import migrations
from paymanager.domain.channels import ChannelName
from paymanager.domain.psp import PspState, can_transition
from tests.support.databases import DatabaseFactory

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


async def test_every_channel_of_the_domain_is_one_the_schema_accepts(conn: asyncpg.Connection) -> None:
    await _an_intent(conn)
    for channel in ChannelName:
        await _insert_intent(conn, channel.value)
        await conn.execute("INSERT INTO policy (id, channel) VALUES ($1, $2)", uuid.uuid4(), channel.value)
    with pytest.raises(asyncpg.CheckViolationError, match="channel"):
        await _insert_intent(conn, "mars-transfer")
    with pytest.raises(asyncpg.CheckViolationError, match="channel"):
        await conn.execute("INSERT INTO policy (id, channel) VALUES ($1, 'mars-transfer')", uuid.uuid4())


PAYOUT_CHANNEL_MIGRATIONS = (401, 402)


async def test_the_payout_channel_migrations_keep_a_populated_database_and_validate_it(
    database_factory: DatabaseFactory,
) -> None:
    url = await database_factory.create_empty()
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(migrations._CREATE_VERSION_TABLE)
        for migration in migrations.available_migrations():
            if migration.version < PAYOUT_CHANNEL_MIGRATIONS[0]:
                await conn.execute(migration.sql)
                await conn.execute(
                    "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
                    migration.version, migration.name,
                )  # fmt: skip
        old = await _an_intent(conn)
        with pytest.raises(asyncpg.CheckViolationError, match="channel"):
            await _insert_intent(conn, ChannelName.QP_TRANSFER.value)
        applied = await migrations.migrate(conn)
        assert [m.version for m in applied][:2] == list(PAYOUT_CHANNEL_MIGRATIONS)
        assert await conn.fetchval("SELECT channel FROM intent WHERE id = $1", old) == "ipps-transfer"
        # Validated on the parents and on every partition, none left NOT VALID.
        rows = await conn.fetch(
            "SELECT conrelid::regclass::text AS tab, convalidated FROM pg_constraint"
            " WHERE contype = 'c' AND conname IN ('intent_channel_check', 'policy_channel_check')"
        )
        tables = {r["tab"] for r in rows}
        assert {"intent", "policy"} < tables  # and the partitions of intent
        assert all(r["convalidated"] for r in rows)
        for channel in (ChannelName.QP_TRANSFER, ChannelName.WISE_TRANSFER):
            await _insert_intent(conn, channel.value)
        with pytest.raises(asyncpg.CheckViolationError, match="channel"):
            await _insert_intent(conn, "mars-transfer")
    finally:
        await conn.close()


async def _insert_intent(conn: asyncpg.Connection, channel: str) -> uuid.UUID:
    payer, payee = uuid.uuid4(), uuid.uuid4()
    await conn.execute(
        "INSERT INTO account (id, kind, currency, owner_service_id) VALUES ($1, 'user', 'THB', $3),"
        " ($2, 'user', 'THB', $3)",
        payer, payee, SERVICE,
    )  # fmt: skip
    intent_id = new_id()
    await conn.execute(
        "INSERT INTO intent (id, service_id, channel, status, amount, fee, currency, payer_account_id,"
        " payee_account_id, created_at, updated_at, expires_at)"
        " VALUES ($1, $2, $3, 'created', 100, 0, 'THB', $4, $5, now(), now(),"
        " CASE WHEN $3 = 'merchant-invoice' THEN now() + interval '1 hour' END)",
        intent_id, SERVICE, channel, payer, payee,
    )  # fmt: skip
    return intent_id


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
