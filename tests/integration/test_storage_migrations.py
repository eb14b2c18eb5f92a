"""The storage migrations (0203-0206, 0301-0307, 0352-0353, 0802) carry a database's existing data over."""

from __future__ import annotations

import uuid

import asyncpg

from paymanager.application.idempotency.keys import key_id
from paymanager.db import migrations
from paymanager.db.pool import create_pool
from paymanager.ledger import PostgresLedger, Transfer, TransferFlags
from tests.support.databases import DatabaseFactory

STORAGE = {203, 204, 205, 206, 301, 302, 303, 304, 305, 306, 307}
# Those of this release, applied to a database of the previous one (0350 included).
STORAGE_NOW = {306, 307, 352}
LATER_RELEASE = 400
# Later components' migrations numbered below LATER_RELEASE: manual capture (0350-0359).
LATER_BELOW = range(350, 360)
SERVICE = "svc_" + "a" * 32
INTENT = uuid.UUID("01900000-0000-7000-8000-000000000001")  # a UUIDv7 of June 2024


async def _old_schema(conn: asyncpg.Connection) -> None:
    """Every migration of the previous release but the storage ones, as such a database has them (the
    later components' migrations, 0400 on and manual capture's, came after it)."""
    await conn.execute(migrations._CREATE_VERSION_TABLE)
    for migration in migrations.available_migrations():
        later = migration.version >= LATER_RELEASE or migration.version in LATER_BELOW
        if migration.version not in STORAGE and not later:
            await conn.execute(migration.sql)
            await conn.execute(
                "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
                migration.version,
                migration.name,
            )


async def _old_data(conn: asyncpg.Connection) -> None:
    await conn.execute(
        "INSERT INTO service (id, name, secret_ciphertext, secret_key_id) VALUES ($1, 'old', '\\x00', 'k')",
        SERVICE,
    )
    payer, payee = uuid.UUID(int=0xA1), uuid.UUID(int=0xA2)
    await conn.execute(
        "INSERT INTO account (id, kind, currency, owner_service_id) VALUES ($1, 'user', 'THB', $3),"
        " ($2, 'user', 'THB', $3)",
        payer, payee, SERVICE,
    )  # fmt: skip
    await conn.execute(
        "INSERT INTO intent (id, service_id, channel, status, amount, fee, currency, payer_account_id,"
        " payee_account_id, version, hold_id, created_at, updated_at, confirmed_at, settle_deadline_at,"
        " finished_at) VALUES ($1, $2, 'internal-p2p', 'settled', 5, 0, 'THB', $3, $4, 3, $1, now(), now(),"
        " now(), now(), now())",
        INTENT, SERVICE, payer, payee,
    )  # fmt: skip
    await conn.execute(
        "INSERT INTO settlement VALUES ($1, 'posted', 'settled', 5, 0, 'THB', 'old', now())", INTENT
    )
    for n in (1, 2):
        await conn.execute(
            "INSERT INTO ledger_account (id, user_data_128, user_data_64, user_data_32, ledger, code, flags,"
            " timestamp) VALUES ($1, $1, 0, 0, 1, 1, 0, $2)",
            uuid.UUID(int=n), n,
        )  # fmt: skip
    await conn.execute("UPDATE ledger_account SET debits_posted = 5 WHERE id = $1", uuid.UUID(int=1))
    await conn.execute("UPDATE ledger_account SET credits_posted = 5 WHERE id = $1", uuid.UUID(int=2))
    # The u32 and u16 values past the signed ranges of integer and smallint, where 0206 stores them
    # as negative numbers, and 0 for those that may be.
    await conn.execute(
        "INSERT INTO ledger_transfer (id, debit_account_id, credit_account_id, amount, pending_id,"
        " user_data_128, user_data_64, user_data_32, timeout, ledger, code, flags, timestamp) VALUES"
        " ($1, $3, $4, 5, NULL, $1, 0, 4294967295, 4294967295, 1, 65535, 2, 10),"
        " ($2, $3, $4, 5, $1, $1, 0, 0, 0, 1, 32768, 4, 11)",
        uuid.UUID(int=0x10), uuid.UUID(int=0x11), uuid.UUID(int=1), uuid.UUID(int=2),
    )  # fmt: skip
    await conn.execute(
        "INSERT INTO ledger_pending VALUES ($1, $2, $3, 5, 'posted', NULL)",
        uuid.UUID(int=0x10), uuid.UUID(int=1), uuid.UUID(int=2),
    )  # fmt: skip
    await conn.execute(
        "INSERT INTO idempotency_key (service_id, key, method, path, request_hash, status_code,"
        " response_body, created_at, expires_at) VALUES ($1, 'k-1', 'POST', '/accounts', $2, 201,"
        " '{\"id\": \"x\"}', now(), now() + interval '1 day')",
        SERVICE, b"h" * 32,
    )  # fmt: skip


async def _transfers_read_as_written(url: str) -> None:
    """The old transfers, read through the ledger after 0206 stored their u32/u16 values as signed bits."""
    pool = await create_pool(url, min_size=1, max_size=2)
    try:
        ledger = PostgresLedger(pool)
        hold, post = await ledger.lookup_transfers([0x10, 0x11])
        assert (hold.user_data_32, hold.timeout, hold.ledger, hold.code, hold.flags) == (
            4294967295, 4294967295, 1, 65535, TransferFlags.PENDING,
        )  # fmt: skip
        assert (post.user_data_32, post.timeout, post.code, post.pending_id) == (0, 0, 32768, 0x10)
        assert [t.id for t in await ledger.get_account_transfers(1, code=65535)] == [0x10]
        assert (await ledger.verify()).ok
    finally:
        await pool.close()


async def test_the_storage_migrations_keep_every_row_of_an_existing_database(
    database_factory: DatabaseFactory,
) -> None:
    url = await database_factory.create_empty()
    try:
        conn = await asyncpg.connect(url)
        try:
            await _old_schema(conn)
            await _old_data(conn)
            applied = await migrations.migrate(conn)
            later = {
                m.version
                for m in migrations.available_migrations()
                if m.version >= LATER_RELEASE or m.version in LATER_BELOW
            }
            assert sorted(m.version for m in applied) == sorted(STORAGE | later)
            assert await conn.fetchval(
                "SELECT tableoid::regclass::text FROM intent WHERE id = $1", INTENT
            ) == ("intent_p_before")
            # The settlement keeps what its intent does not say (0353).
            settled = await conn.fetchrow("SELECT * FROM settlement WHERE intent_id = $1", INTENT)
            assert settled is not None
            assert (settled["outcome"], settled["settled_by"]) == ("posted", "old")
            assert "amount" not in settled
            assert await conn.fetchval("SELECT count(*) FROM ledger_transfer") == 2
            await _transfers_read_as_written(url)
            # A posted pending transfer keeps no state row: its post says it (0205).
            assert await conn.fetchval("SELECT count(*) FROM ledger_pending") == 0
            kept = await conn.fetchrow(
                "SELECT status_code, response_body, request_hash FROM idempotency_key WHERE id = $1",
                key_id(SERVICE, "k-1"),
            )
            # The hash is cut to 16 bytes (0304), which a replay compares over; the path is gone (0352).
            assert dict(kept) == {
                "status_code": 201, "response_body": '{"id": "x"}', "request_hash": b"h" * 16,
            }  # fmt: skip
        finally:
            await conn.close()
    finally:
        await database_factory.drop(url)


async def _waiting_intents(conn: asyncpg.Connection) -> dict[str, uuid.UUID]:
    """An intent in each status that waits for a deadline, and a settled one, on the schema of main."""
    await conn.execute(
        "INSERT INTO service (id, name, secret_ciphertext, secret_key_id) VALUES ($1, 'old', '\\x00', 'k')",
        SERVICE,
    )
    payer, payee = uuid.UUID(int=0xA1), uuid.UUID(int=0xA2)
    await conn.execute(
        "INSERT INTO account (id, kind, currency, owner_service_id) VALUES ($1, 'user', 'THB', $3),"
        " ($2, 'merchant', 'THB', $3)",
        payer, payee, SERVICE,
    )  # fmt: skip
    ids = {
        status: uuid.UUID(f"01900000-0000-7000-8000-00000000000{n}")
        for n, status in enumerate(("created", "confirmed", "requires_capture", "settled"), start=1)
    }
    # (channel, status, capture method, version, expires_at, settle_deadline_at, finished_at)
    rows = {
        "created": ("merchant-invoice", "created", "automatic", 1, "2024-06-02", None, None),
        "confirmed": ("internal-p2p", "confirmed", "automatic", 2, None, "2024-06-03", None),
        "requires_capture": ("internal-p2p", "requires_capture", "manual", 2, None, "2024-06-04", None),
        "settled": ("internal-p2p", "settled", "automatic", 3, None, "2024-06-01", "2024-06-01"),
    }
    for status, (channel, st, method, version, expires, deadline, finished) in rows.items():
        confirmed = deadline is not None
        await conn.execute(
            "INSERT INTO intent (id, service_id, channel, status, capture_method, amount, fee, currency,"
            " payer_account_id, payee_account_id, version, hold_id, created_at, updated_at, expires_at,"
            " confirmed_at, settle_deadline_at, finished_at)"
            " VALUES ($1::uuid, $2, $3, $4, $5, 5, 0, 'THB', $6, $7, $8,"
            " CASE WHEN $12::boolean THEN $1::uuid END,"
            " now(), now(), $9::text::timestamptz, CASE WHEN $12 THEN now() END, $10::text::timestamptz,"
            " $11::text::timestamptz)",
            ids[status], SERVICE, channel, st, method, payer, payee, version, expires, deadline, finished,
            confirmed,
        )  # fmt: skip
    return ids


async def test_the_storage_migrations_of_this_release_carry_a_database_of_the_previous_one_over(
    database_factory: DatabaseFactory,
) -> None:
    url = await database_factory.create_empty()
    try:
        conn = await asyncpg.connect(url)
        try:
            await conn.execute(migrations._CREATE_VERSION_TABLE)
            await migrations.migrate(conn, only=lambda version: version not in STORAGE_NOW)
            ids = await _waiting_intents(conn)
            await conn.execute(
                "INSERT INTO idempotency_key (id, expires_at, status_code, request_hash, path, response_body)"
                " VALUES ($1, now() + interval '1 day', 201, $2, '/accounts', '{\"id\": \"x\"}')",
                key_id(SERVICE, "k-1"), b"h" * 16,
            )  # fmt: skip
            applied = await migrations.migrate(conn)
            assert sorted(m.version for m in applied) == sorted(STORAGE_NOW)
            # 0306: the intents that wait, each with its deadline; the partial indexes gone.
            due = {
                r["status"]: (r["intent_id"], r["due_at"].date().isoformat())
                for r in await conn.fetch("SELECT * FROM intent_due")
            }
            assert due == {
                "created": (ids["created"], "2024-06-02"),
                "confirmed": (ids["confirmed"], "2024-06-03"),
                "requires_capture": (ids["requires_capture"], "2024-06-04"),
            }
            indexes = await conn.fetchval(
                "SELECT array_agg(indexname::text ORDER BY indexname) FROM pg_indexes"
                " WHERE tablename = 'intent'"
            )
            assert indexes == ["intent_payee_idx", "intent_payer_idx", "intent_pkey", "intent_service_idx"]
            # The trigger keeps it from now on: a settlement ends the wait.
            await conn.execute(
                "UPDATE intent SET status = 'settled', version = version + 1, finished_at = now()"
                " WHERE id = $1",
                ids["confirmed"],
            )
            assert (
                await conn.fetchval("SELECT count(*) FROM intent_due WHERE intent_id = $1", ids["confirmed"])
                == 0
            )
            # 0307 and 0352: a key stored before is read by the new claim, and its lock taken; its
            # 16 bytes of hash are kept (a replay compares over them), its path is gone.
            claimed = await conn.fetchrow(
                "SELECT * FROM idempotency_key_claim_signed($1, $2, now(), $3, now() + interval '5 minutes')",
                SERVICE, key_id(SERVICE, "k-1"), b"s" * 32,
            )  # fmt: skip
            assert (claimed["fresh_signature"], claimed["status_code"], claimed["request_hash"]) == (
                True,
                201,
                b"h" * 16,
            )
            assert "path" not in claimed
            indexes = await conn.fetchval(
                "SELECT array_agg(indexname::text) FROM pg_indexes WHERE tablename = 'idempotency_key'"
            )
            assert indexes == ["idempotency_key_pkey"]
        finally:
            await conn.close()
    finally:
        await database_factory.drop(url)


ACCOUNT_NUMBERS = 802


async def test_the_account_numbers_migration_converts_transfers_and_reads_them_back_as_ids(
    database_factory: DatabaseFactory,
) -> None:
    """0802: transfers written with 16-byte account ids keep naming the same accounts once stored as
    account numbers, through every reader, and partitions made afterwards index the numbers."""
    url = await database_factory.create_empty()
    try:
        conn = await asyncpg.connect(url)
        try:
            await conn.execute(migrations._CREATE_VERSION_TABLE)
            await migrations.migrate(conn, only=lambda version: version != ACCOUNT_NUMBERS)
            # Accounts 3 and 1 created in that order, so numbers and ids do not sort alike.
            for n, ts in ((3, 1), (1, 2), (2, 3)):
                await conn.execute(
                    "INSERT INTO ledger_account (id, user_data_128, user_data_64, user_data_32, ledger, code,"
                    " flags, timestamp) VALUES ($1, $1, 0, 0, 1, 1, 0, $2)",
                    uuid.UUID(int=n), ts,
                )  # fmt: skip
            await conn.execute(
                "UPDATE ledger_account SET debits_posted = 5, credits_pending = 7 WHERE id = $1",
                uuid.UUID(int=3),
            )
            await conn.execute(
                "UPDATE ledger_account SET credits_posted = 5, debits_pending = 7 WHERE id = $1",
                uuid.UUID(int=1),
            )
            # A posted transfer 3 -> 1 and a pending one 1 -> 3, still open, of this month.
            now_ns = await conn.fetchval("SELECT ledger_month_ns((now() AT TIME ZONE 'UTC')::date) + 1000")
            await conn.execute(
                "INSERT INTO ledger_transfer (id, debit_account_id, credit_account_id, amount, pending_id,"
                " user_data_128, user_data_64, user_data_32, timeout, ledger, code, flags, timestamp) VALUES"
                " ($1, $3, $4, 5, NULL, $1, 0, 0, 0, 1, 1, 0, $5),"
                " ($2, $4, $3, 7, NULL, $2, 0, 0, 0, 1, 1, 2, $5 + 1)",
                uuid.UUID(int=0x10), uuid.UUID(int=0x11), uuid.UUID(int=3), uuid.UUID(int=1), now_ns,
            )  # fmt: skip
            await conn.execute("INSERT INTO ledger_pending VALUES ($1, 'pending', NULL)", uuid.UUID(int=0x11))
            applied = await migrations.migrate(conn)
            assert [m.version for m in applied] == [ACCOUNT_NUMBERS]
            columns = dict(
                await conn.fetch(
                    "SELECT attname::text, format_type(atttypid, atttypmod) FROM pg_attribute"
                    " WHERE attrelid = 'ledger_transfer'::regclass AND attname LIKE '%account%'"
                    " AND NOT attisdropped"
                )
            )
            assert columns == {"debit_account_number": "bigint", "credit_account_number": "bigint"}
            numbers = dict(await conn.fetch("SELECT id, number FROM ledger_account"))
            assert len(set(numbers.values())) == 3
            stored = await conn.fetchrow(
                "SELECT debit_account_number, credit_account_number FROM ledger_transfer WHERE id = $1",
                uuid.UUID(int=0x10),
            )
            assert tuple(stored) == (numbers[uuid.UUID(int=3)], numbers[uuid.UUID(int=1)])
            # A partition made after the migration indexes the numbers (ledger_transfer_partition_create).
            assert await conn.fetchval("SELECT ledger_transfer_partition_create('2200-01-01')")
            definitions = await conn.fetchval(
                "SELECT array_agg(indexdef ORDER BY indexdef) FROM pg_indexes"
                " WHERE tablename = 'ledger_transfer_p2200_01' AND indexdef LIKE '%account%'"
            )
            assert [d.split(" USING ")[1] for d in definitions] == [
                'btree (credit_account_number, "timestamp")',
                'btree (debit_account_number, "timestamp")',
            ]
        finally:
            await conn.close()
        pool = await create_pool(url, min_size=1, max_size=2)
        try:
            ledger = PostgresLedger(pool)
            posted, pending = await ledger.lookup_transfers([0x10, 0x11])
            assert (posted.debit_account_id, posted.credit_account_id) == (3, 1)
            assert (pending.debit_account_id, pending.credit_account_id) == (1, 3)
            assert [t.id for t in await ledger.get_account_transfers(1)] == [0x10, 0x11]
            assert (await ledger.verify()).ok
            # The open hold resolves on its converted accounts: a void gives account 1 its 7 back.
            voided = await ledger.create_transfers(
                [Transfer(0x12, pending_id=0x11, ledger=1, code=1, flags=TransferFlags.VOID_PENDING_TRANSFER)]
            )
            assert voided[0].ok, voided
            (one,) = await ledger.lookup_accounts([1])
            assert (one.debits_pending, one.credits_posted) == (0, 5)
            assert (await ledger.verify()).ok
        finally:
            await pool.close()
    finally:
        await database_factory.drop(url)
