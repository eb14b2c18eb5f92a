"""History partitions: months are created ahead, and an old month detaches while traffic runs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

import asyncpg
import httpx
import pytest

from paymanager import bootstrap
from paymanager.api.app import create_app
from paymanager.application import ids
from paymanager.application.intents import create as create_module
from paymanager.application.services.use_cases import create_service
from paymanager.application.storage.archive import (
    ArchiveRefusedError,
    DetachedMonth,
    detach_month,
    partition_suffix,
)
from paymanager.ledger import PostgresLedger
from paymanager.ledger.types import Account, Transfer, TransferFlags
from tests.integration.payments.conftest import build_components
from tests.support.signed_client import SignedClient
from tests.support.waiting import wait_until

# A month long before the migrations ran: its rows live in the `p_before` partitions.
OLD_MS = int(datetime(2025, 1, 15, tzinfo=UTC).timestamp() * 1000)
OLD_NS = OLD_MS * 1_000_000


@dataclass
class Live:
    components: bootstrap.Components
    admin: SignedClient
    shop: SignedClient


@pytest.fixture
async def live(pool: asyncpg.Pool, database_url: str) -> AsyncIterator[Live]:
    """An api and an outbox worker in this process, over ASGI: intents settle as in production."""
    components = await build_components(pool, database_url, worker_roles="api,outbox-worker")
    for service in components.services:
        await service.start()
    async with pool.acquire() as conn:
        admin, admin_secret = await create_service(conn, components.payments.box, "admin", admin=True)
        shop, shop_secret = await create_service(conn, components.payments.box, "shop", admin=False)
    app = create_app(components)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as http:
        yield Live(
            components, SignedClient(http, admin.id, admin_secret), SignedClient(http, shop.id, shop_secret)
        )
    for service in reversed(components.services):
        await service.stop(5)
    await components.close()


async def _funded_pair(live: Live) -> tuple[str, str]:
    payer, payee = await live.shop.open_account(), await live.shop.open_account()
    funding = await live.admin.post(
        "/intents",
        {"channel": "admin-transfer", "amount": 10**9, "currency": "THB", "payee_account_id": payer},
    )
    assert (await live.admin.post(f"/intents/{funding.json()['id']}/confirm")).status_code == 200
    await wait_until(lambda: _all_settled(live.components.payments.pool, [funding.json()["id"]]))
    return payer, payee


async def _p2p(client: SignedClient, payer: str, payee: str, amount: int) -> str:
    body = {
        "channel": "internal-p2p", "amount": amount, "currency": "THB",
        "payer_account_id": payer, "payee_account_id": payee,
    }  # fmt: skip
    created = await client.post("/intents", body)
    assert created.status_code == 201, created.text
    confirmed = await client.post(f"/intents/{created.json()['id']}/confirm")
    assert confirmed.status_code == 200, confirmed.text
    return str(created.json()["id"])


async def _all_settled(pool: asyncpg.Pool, intent_ids: list[str]) -> bool:
    settled = await pool.fetchval(
        "SELECT count(*) FROM intent AS i JOIN settlement AS s ON s.intent_id = i.id"
        " WHERE i.id = ANY($1::uuid[]) AND i.status = 'settled'",
        intent_ids,
    )
    return bool(settled == len(intent_ids))


@dataclass
class Traffic:
    """Clients creating and confirming intents until told to stop; every answer is kept."""

    ids: list[str] = field(default_factory=list)
    failures: list[BaseException] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self, client: SignedClient, payer: str, payee: str) -> None:
        while not self.stop.is_set():
            try:
                self.ids.append(await _p2p(client, payer, payee, 100 + len(self.ids)))
            except Exception as exc:  # every failure is the test's finding, kept and asserted on
                self.failures.append(exc)


async def _old_history(live: Live, monkeypatch: pytest.MonkeyPatch, payer: str, payee: str) -> list[str]:
    """Settled intents whose ids fall in an old month, and ledger transfers timestamped in it."""
    counter = iter(range(1_000))
    with monkeypatch.context() as patch:
        patch.setattr(create_module, "new_id", lambda: ids.new_id(OLD_MS + next(counter)))
        old = [await _p2p(live.shop, payer, payee, 500 + n) for n in range(3)]
    await wait_until(lambda: _all_settled(live.components.payments.pool, old))
    ledger = PostgresLedger(live.components.payments.pool, clock=lambda: OLD_NS)
    accounts = [Account(id=0xA0 + n, ledger=9, code=1) for n in range(2)]
    assert all(r.ok for r in await ledger.create_accounts(accounts))
    transfers = [
        Transfer(0xB1, 0xA0, 0xA1, amount=7, ledger=9, code=1),
        Transfer(0xB2, 0xA1, 0xA0, amount=3, ledger=9, code=1, flags=TransferFlags.PENDING, timeout=60),
        Transfer(
            0xB3,
            0xA1,
            0xA0,
            amount=3,
            ledger=9,
            code=1,
            pending_id=0xB2,
            flags=TransferFlags.POST_PENDING_TRANSFER,
        ),
    ]
    assert all(r.ok for r in await ledger.create_transfers(transfers))
    await ledger.close()
    return old


async def test_an_old_month_detaches_while_intents_are_created_and_settled(
    live: Live, pool: asyncpg.Pool, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    payer, payee = await _funded_pair(live)
    old = await _old_history(live, monkeypatch, payer, payee)
    traffic = Traffic()
    clients = [asyncio.create_task(traffic.run(live.shop, payer, payee)) for _ in range(4)]
    try:
        await wait_until(lambda: _at_least(traffic, 10), timeout_s=60)
        detached = await _detach(database_url, "before")
        after_detach = len(traffic.ids)
        await wait_until(lambda: _at_least(traffic, after_detach + 10), timeout_s=60)
    finally:
        traffic.stop.set()
        await asyncio.gather(*clients)
    assert traffic.failures == []
    # Nothing lost: every intent of the traffic settled, and the old month is whole in its tables.
    await wait_until(lambda: _all_settled(pool, traffic.ids), timeout_s=60)
    assert detached.tables == {"intent_p_before": 3, "ledger_transfer_p_before": 3, "settlement_p_before": 3}
    assert await pool.fetchval("SELECT count(*) FROM intent WHERE id = ANY($1::uuid[])", old) == 0
    assert await pool.fetchval("SELECT count(*) FROM intent_p_before WHERE id = ANY($1::uuid[])", old) == 3
    assert (
        await pool.fetchval("SELECT count(*) FROM settlement_p_before WHERE intent_id = ANY($1::uuid[])", old)
        == 3
    )
    assert (await live.components.ledger.verify()).violations == []
    # The detached month is no partition any more, and detaching again finds nothing to do.
    again = await _detach(database_url, "before")
    assert again.tables == detached.tables


async def _at_least(traffic: Traffic, count: int) -> bool:
    return len(traffic.ids) >= count or bool(traffic.failures)


async def _detach(database_url: str, month: str) -> DetachedMonth:
    conn = await asyncpg.connect(database_url)
    try:
        return await detach_month(conn, month)
    finally:
        await conn.close()


async def test_a_month_with_unfinished_intents_is_not_detached(
    live: Live, pool: asyncpg.Pool, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    payer, _ = await _funded_pair(live)
    with monkeypatch.context() as patch:
        patch.setattr(create_module, "new_id", lambda: ids.new_id(OLD_MS))
        body = {"channel": "internal-p2p", "amount": 5, "currency": "THB", "payer_account_id": payer}
        body["payee_account_id"] = await live.shop.open_account()
        assert (await live.shop.post("/intents", body)).status_code == 201
    with pytest.raises(ArchiveRefusedError, match="1 intents not yet finished"):
        await _detach(database_url, "before")
    assert (
        await pool.fetchval("SELECT count(*) FROM pg_inherits WHERE inhrelid = 'intent_p_before'::regclass")
        == 1
    )


def test_a_month_is_named_as_a_partition_or_refused() -> None:
    assert partition_suffix("2026-01") == "p2026_01"
    assert partition_suffix("before") == "p_before"
    for bad in ("2026-13", "2026_01", "x; DROP TABLE intent", "26-01"):
        with pytest.raises(ArchiveRefusedError):
            partition_suffix(bad)


async def test_partitions_exist_for_this_month_and_the_months_ahead(live: Live, pool: asyncpg.Pool) -> None:
    months_ahead = live.components.settings.history_partition_months_ahead
    now = datetime.now(UTC)
    wanted = []
    for i in range(months_ahead + 1):
        year, month = divmod(now.month - 1 + i, 12)
        suffix = f"p{now.year + year}_{month + 1:02d}"
        wanted += [f"intent_{suffix}", f"settlement_{suffix}", f"ledger_transfer_{suffix}"]
    attached = await pool.fetch(
        "SELECT c.relname FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid"
        " WHERE c.relname = ANY($1)",
        wanted,
    )
    assert sorted(r["relname"] for r in attached) == sorted(wanted)


async def test_an_intent_lands_in_the_partition_of_its_month(live: Live, pool: asyncpg.Pool) -> None:
    payer, payee = await _funded_pair(live)
    intent_id = await _p2p(live.shop, payer, payee, 10)
    await wait_until(lambda: _all_settled(pool, [intent_id]))
    now = datetime.now(UTC)
    where = await pool.fetchrow(
        "SELECT i.tableoid::regclass::text AS intent, s.tableoid::regclass::text AS settlement"
        " FROM intent AS i JOIN settlement AS s ON s.intent_id = i.id WHERE i.id = $1::uuid",
        intent_id,
    )
    assert dict(where) == {"intent": f"intent_p{now:%Y_%m}", "settlement": f"settlement_p{now:%Y_%m}"}
