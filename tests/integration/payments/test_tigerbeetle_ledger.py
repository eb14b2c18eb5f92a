"""Payments on a real TigerBeetle replica: every way an intent ends, and the decide-then-apply
protocol (application/holds/resolve.py) with a failure injected at each of its crash points."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from paymanager.adapters.secret_box import Secret
from paymanager.application import ledger_ops
from paymanager.application.accounts.use_cases import OpenAccount, open_account
from paymanager.application.holds import resolve
from paymanager.application.ids import transfer_id
from paymanager.application.intents import events
from paymanager.application.intents.cancel import cancel_intent
from paymanager.application.intents.capture import capture_intent
from paymanager.application.intents.confirm import confirm_intent
from paymanager.application.intents.invoice_sweep import sweep, sweep_invoices
from paymanager.application.intents.reconcile import reconcile
from paymanager.application.intents.settle import settle, settle_many
from paymanager.application.services.use_cases import ServiceIdentity
from paymanager.db.pool import create_pool
from paymanager.domain.channels import AccountKind
from paymanager.ledger import TigerBeetleLedger
from tests.integration.payments.conftest import Api, open_api
from tests.support.intent_flows import balance_figures
from tests.support.locks import wait_for_a_waiter_behind
from tests.support.lost_confirms import confirm_then_roll_back, funded_invoice, voided_legs


class Crash(Exception):
    """The process dying at a crash point: nothing after it runs."""


@pytest.fixture
async def tb_api(pool: asyncpg.Pool, database_url: str, tigerbeetle_address: str) -> AsyncIterator[Api]:
    async for opened in open_api(
        pool, database_url, ledger_backend="tigerbeetle", tb_address=tigerbeetle_address
    ):
        assert isinstance(opened.payments.ledger, TigerBeetleLedger)
        yield opened


def crash_once_at(point: str) -> Callable[[str], Awaitable[None]]:
    crashed = False

    async def checkpoint(reached: str) -> None:
        nonlocal crashed
        if reached == point and not crashed:
            crashed = True
            raise Crash(point)

    return checkpoint


async def _settle(api: Api, intent_id: str) -> None:
    async with api.payments.pool.acquire() as conn, conn.transaction():
        await settle(api.payments, conn, uuid.UUID(intent_id), settled_by="test")


async def _funded_pair(api: Api, amount: int = 10_000) -> tuple[str, str]:
    payer = await api.client.open_account()
    payee = await api.client.open_account()
    funding = await api.admin.fund(payer, amount)
    await _settle(api, funding["id"])
    return payer, payee


async def _confirmed(api: Api, payer: str, payee: str, amount: int) -> tuple[str, int]:
    body = {
        "channel": "internal-p2p", "amount": amount, "currency": "THB",
        "payer_account_id": payer, "payee_account_id": payee,
    }  # fmt: skip
    created = await api.client.post("/intents", body)
    assert created.status_code == 201, created.text
    confirmed = await api.client.post(f"/intents/{created.json()['id']}/confirm")
    assert confirmed.status_code == 200, confirmed.text
    return created.json()["id"], created.json()["fee"]


def _shop(api: Api) -> ServiceIdentity:
    return ServiceIdentity(api.client.service_id, "shop", frozenset(), Secret(b"unused"))


async def _status(api: Api, intent_id: str) -> str:
    return str((await api.client.get(f"/intents/{intent_id}")).json()["status"])


async def _decision(api: Api, intent_id: str) -> tuple[str, str] | None:
    async with api.payments.pool.acquire() as conn:
        row = await conn.fetchrow(
            "SELECT action, status FROM ledger_decision WHERE intent_id = $1::uuid", intent_id
        )
    return None if row is None else (row["action"], row["status"])


async def _settlements(api: Api, intent_id: str) -> list[str]:
    async with api.payments.pool.acquire() as conn:
        rows = await conn.fetch("SELECT outcome FROM settlement WHERE intent_id = $1::uuid", intent_id)
    return [row["outcome"] for row in rows]


async def _ledger_has(api: Api, intent_id: str, purpose: str) -> bool:
    """Whether TigerBeetle holds the transfer `purpose` (e.g. post.amount) of the intent's hold."""
    async with api.payments.pool.acquire() as conn:
        hold = await conn.fetchval("SELECT hold_id FROM intent WHERE id = $1::uuid", intent_id)
    found = await api.payments.ledger.lookup_transfers([transfer_id(hold, purpose)])
    return bool(found)


async def test_p2p_confirm_and_settle_on_tigerbeetle_moves_amount_and_fee_once(tb_api: Api) -> None:
    api = tb_api
    payer, payee = await _funded_pair(api)
    intent_id, fee = await _confirmed(api, payer, payee, 2_000)
    held = await api.client.balance(payer)
    assert (held["posted"], held["available"]) == (10_000, 10_000 - 2_000 - fee)
    await _settle(api, intent_id)
    await _settle(api, intent_id)  # a retried job: the intent is final, nothing more moves
    assert await _status(api, intent_id) == "settled"
    assert (await api.client.balance(payer))["posted"] == 10_000 - 2_000 - fee
    assert (await api.client.balance(payee))["posted"] == 2_000
    assert await _decision(api, intent_id) == ("post", "settled")
    assert await _settlements(api, intent_id) == ["posted"]


async def test_cancel_after_confirm_voids_the_hold_on_tigerbeetle(tb_api: Api) -> None:
    api = tb_api
    payer, payee = await _funded_pair(api)
    intent_id, _ = await _confirmed(api, payer, payee, 1_000)
    cancelled = await api.client.post(f"/intents/{intent_id}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "cancelled"
    balance = await api.client.balance(payer)
    assert (balance["posted"], balance["available"]) == (10_000, 10_000)
    assert await _decision(api, intent_id) == ("void", "cancelled")
    assert await _ledger_has(api, intent_id, "void.amount")
    assert not await _ledger_has(api, intent_id, "post.amount")


async def test_a_refused_hold_on_tigerbeetle_answers_insufficient_funds_and_changes_nothing(
    tb_api: Api,
) -> None:
    api = tb_api
    payer, payee = await _funded_pair(api, amount=500)
    body = {
        "channel": "internal-p2p", "amount": 1_000, "currency": "THB",
        "payer_account_id": payer, "payee_account_id": payee,
    }  # fmt: skip
    created = await api.client.post("/intents", body)
    refused = await api.client.post(f"/intents/{created.json()['id']}/confirm")
    assert refused.status_code == 422, refused.text
    assert await _status(api, created.json()["id"]) == "created"
    assert (await api.client.balance(payer))["available"] == 500
    # TigerBeetle burned the refused hold's id: once funded, the next confirm holds with a new one.
    top_up = await api.admin.fund(payer, 1_000)
    await _settle(api, top_up["id"])
    again = await api.client.post(f"/intents/{created.json()['id']}/confirm")
    assert again.status_code == 200, again.text
    assert (await api.client.balance(payer))["available"] == 1_500 - 1_000 - created.json()["fee"]


async def test_crash_after_the_decision_before_tigerbeetle_the_retry_carries_the_decision_out(
    tb_api: Api,
) -> None:
    api = tb_api
    payer, payee = await _funded_pair(api)
    intent_id, fee = await _confirmed(api, payer, payee, 1_000)
    api.payments.checkpoint = crash_once_at(resolve.DECIDED)
    with pytest.raises(Crash):
        await _settle(api, intent_id)
    # Decided and durable, the ledger not asked, the intent not final.
    assert await _decision(api, intent_id) == ("post", "settled")
    assert await _status(api, intent_id) == "confirmed"
    assert not await _ledger_has(api, intent_id, "post.amount")
    # A cancel now would void a hold whose post is decided: it loses, as against a settlement.
    cancel = await api.client.post(f"/intents/{intent_id}/cancel")
    assert cancel.status_code == 409, cancel.text
    assert cancel.json()["error"]["code"] == "invalid_transition"
    assert not await _ledger_has(api, intent_id, "void.amount")
    await _settle(api, intent_id)
    assert await _status(api, intent_id) == "settled"
    assert (await api.client.balance(payee))["posted"] == 1_000
    assert (await api.client.balance(payer))["posted"] == 10_000 - 1_000 - fee
    assert await _settlements(api, intent_id) == ["posted"]


async def test_crash_after_tigerbeetle_answered_before_the_commit_the_retry_finds_it_posted(
    tb_api: Api,
) -> None:
    api = tb_api
    payer, payee = await _funded_pair(api)
    intent_id, fee = await _confirmed(api, payer, payee, 1_000)
    api.payments.checkpoint = crash_once_at(resolve.APPLIED)
    with pytest.raises(Crash):
        await _settle(api, intent_id)
    # The money moved; the intent is not final until a retry records it.
    assert await _status(api, intent_id) == "confirmed"
    assert (await api.client.balance(payee))["posted"] == 1_000
    await _settle(api, intent_id)
    assert await _status(api, intent_id) == "settled"
    assert (await api.client.balance(payee))["posted"] == 1_000  # `exists`: not moved again
    assert (await api.client.balance(payer))["posted"] == 10_000 - 1_000 - fee
    assert await _settlements(api, intent_id) == ["posted"]


async def test_a_decided_void_wins_over_a_later_settlement_so_post_and_void_never_both_run(
    tb_api: Api,
) -> None:
    api = tb_api
    payer, payee = await _funded_pair(api)
    intent_id, _ = await _confirmed(api, payer, payee, 1_000)
    api.payments.checkpoint = crash_once_at(resolve.DECIDED)
    with pytest.raises(Crash):
        async with api.payments.pool.acquire() as conn, conn.transaction():
            await cancel_intent(api.payments, conn, _shop(api), uuid.UUID(intent_id), [])
    assert await _decision(api, intent_id) == ("void", "cancelled")
    assert await _status(api, intent_id) == "confirmed"
    await _settle(api, intent_id)  # the settlement job comes next and carries out the void
    assert await _status(api, intent_id) == "cancelled"
    assert not await _ledger_has(api, intent_id, "post.amount")
    assert await _ledger_has(api, intent_id, "void.amount")
    assert (await api.client.balance(payer))["available"] == 10_000
    assert (await api.client.balance(payee))["posted"] == 0
    assert await _settlements(api, intent_id) == ["voided"]


async def test_crash_between_the_hold_and_the_confirm_commit_is_found_by_the_retry_or_released(
    tb_api: Api,
) -> None:
    api = tb_api
    payer, payee = await _funded_pair(api)
    body = {
        "channel": "internal-p2p", "amount": 1_000, "currency": "THB",
        "payer_account_id": payer, "payee_account_id": payee,
    }  # fmt: skip
    retried = (await api.client.post("/intents", body)).json()
    released = (await api.client.post("/intents", body)).json()
    caller = _shop(api)
    for intent in (retried, released):
        async with api.payments.pool.acquire() as conn:
            transaction = conn.transaction()
            await transaction.start()
            await confirm_intent(api.payments, conn, caller, uuid.UUID(intent["id"]), events.Pending())
            await transaction.rollback()  # the process died before its commit
    total = 2 * (1_000 + retried["fee"])
    assert (await api.client.balance(payer))["available"] == 10_000 - total
    assert await _status(api, retried["id"]) == "created"
    # The retried confirm submits the same hold and finds it (`exists`): held once, not twice.
    confirmed = await api.client.post(f"/intents/{retried['id']}/confirm")
    assert confirmed.status_code == 200, confirmed.text
    assert (await api.client.balance(payer))["available"] == 10_000 - total
    # Cancelling the other intent (still created) releases the hold its lost confirm left.
    cancelled = await api.client.post(f"/intents/{released['id']}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    assert (await api.client.balance(payer))["available"] == 10_000 - 1_000 - retried["fee"]
    await _settle(api, retried["id"])
    assert await _status(api, retried["id"]) == "settled"
    assert (await api.client.balance(payee))["posted"] == 1_000


async def test_a_cancel_racing_a_settlement_on_tigerbeetle_waits_and_answers_409(tb_api: Api) -> None:
    api = tb_api
    payer, payee = await _funded_pair(api)
    intent_id, _ = await _confirmed(api, payer, payee, 1_000)
    async with api.payments.pool.acquire() as settling:
        transaction = settling.transaction()
        await transaction.start()
        await settle(api.payments, settling, uuid.UUID(intent_id), settled_by="test")
        cancel = asyncio.create_task(api.client.post(f"/intents/{intent_id}/cancel"))
        try:
            await wait_for_a_waiter_behind(api.payments.pool, settling.get_server_pid())
        finally:
            await transaction.commit()
    cancelled = await cancel
    assert cancelled.status_code == 409, cancelled.text
    assert await _status(api, intent_id) == "settled"
    assert (await api.client.balance(payee))["posted"] == 1_000


async def test_a_settlement_group_on_tigerbeetle_settles_each_intent_once(tb_api: Api) -> None:
    api = tb_api
    payer, payee = await _funded_pair(api, amount=100_000)
    ids = [(await _confirmed(api, payer, payee, 100 + i))[0] for i in range(5)]
    api.payments.checkpoint = crash_once_at(resolve.APPLIED)
    with pytest.raises(Crash):
        async with api.payments.pool.acquire() as conn, conn.transaction():
            await settle_many(api.payments, conn, [uuid.UUID(i) for i in ids], settled_by="test")
    async with api.payments.pool.acquire() as conn, conn.transaction():
        outcomes = await settle_many(api.payments, conn, [uuid.UUID(i) for i in ids], settled_by="test")
    assert all(isinstance(o, dict) and o["status"] == "settled" for o in outcomes), outcomes
    assert (await api.client.balance(payee))["posted"] == sum(100 + i for i in range(5))
    for intent_id in ids:
        assert await _settlements(api, intent_id) == ["posted"]


async def test_the_reconciler_fails_an_intent_past_its_deadline_on_tigerbeetle(tb_api: Api) -> None:
    api = tb_api
    payer, payee = await _funded_pair(api)
    intent_id, _ = await _confirmed(api, payer, payee, 1_000)
    api.clock.now = datetime.now(UTC) + timedelta(days=2)
    report = await reconcile(api.payments, batch_size=10, max_intents=1_000)
    api.clock.now = None
    assert report.failed >= 1
    assert await _status(api, intent_id) == "failed"
    assert (await api.client.balance(payer))["available"] == 10_000
    assert await _decision(api, intent_id) == ("void", "failed")


async def test_an_invoice_expiring_on_tigerbeetle_ends_without_moving_money(tb_api: Api) -> None:
    api = tb_api
    payer = await api.client.open_account()
    merchant = await api.client.open_account(kind="merchant")
    body = {
        "channel": "merchant-invoice", "amount": 100, "currency": "THB", "payer_account_id": payer,
        "payee_account_id": merchant, "expires_in_sec": 60,
    }  # fmt: skip
    due = (await api.client.post("/intents", body)).json()["id"]
    api.clock.now = datetime.now(UTC) + timedelta(seconds=120)
    refused = await api.client.request(
        "POST", f"/intents/{due}/confirm", timestamp=int(api.clock.now.timestamp())
    )
    api.clock.now = None
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["code"] == "intent_expired"
    assert await _status(api, due) == "expired"
    assert (await api.client.balance(merchant))["posted"] == 0


async def test_a_sweep_dying_after_it_voided_a_lost_confirms_hold_voids_it_again_as_exists(
    tb_api: Api,
) -> None:
    api = tb_api
    payer, invoice = await funded_invoice(api, funding=10_000, amount=1_000, expires_in_sec=60)
    await confirm_then_roll_back(api, invoice["id"])
    api.clock.now = datetime.now(UTC) + timedelta(seconds=120)
    api.payments.checkpoint = crash_once_at(resolve.RELEASED)
    with pytest.raises(Crash):
        await sweep_invoices(api.payments)
    # The void reached TigerBeetle; the expiry did not commit.
    assert await _status(api, invoice["id"]) == "created"
    assert (await api.client.balance(payer))["available"] == 10_000
    # The next sweep submits the same void ids: `exists`, not a refusal, and the invoice expires.
    assert await sweep_invoices(api.payments) == 1
    api.clock.now = None
    assert await _status(api, invoice["id"]) == "expired"
    assert (await api.client.balance(payer))["available"] == 10_000
    assert await voided_legs(api, invoice["id"]) == 2


async def test_an_account_left_in_tigerbeetle_by_a_rolled_back_open_is_empty_and_unreachable(
    tb_api: Api,
) -> None:
    """TigerBeetle creates the account before the row's transaction commits; when that rolls back the
    ledger keeps an account no row names (ARCHITECTURE.md: harmless). Its id is random, and every
    intent names its parties by row, so no money can ever reach it."""
    api = tb_api
    async with api.payments.pool.acquire() as conn:
        transaction = conn.transaction()
        await transaction.start()
        opened = await open_account(api.payments, conn, _shop(api), OpenAccount(AccountKind.USER, "THB"))
        await transaction.rollback()
    (left,) = await api.payments.ledger.lookup_accounts([opened.id.int])
    assert (left.debits_pending, left.debits_posted, left.credits_pending, left.credits_posted) == (
        0,
        0,
        0,
        0,
    )
    orphan = str(opened.id)
    assert (await api.client.get(f"/accounts/{orphan}")).status_code == 404
    payer, _ = await _funded_pair(api)
    body = {
        "channel": "internal-p2p", "amount": 100, "currency": "THB",
        "payer_account_id": payer, "payee_account_id": orphan,
    }  # fmt: skip
    paid = await api.client.post("/intents", body)
    funded = await api.admin.post(
        "/intents",
        {"channel": "admin-transfer", "amount": 100, "currency": "THB", "payee_account_id": orphan},
    )
    assert (paid.status_code, funded.status_code) == (404, 404), (paid.text, funded.text)
    (still,) = await api.payments.ledger.lookup_accounts([opened.id.int])
    assert (still.debits_posted, still.credits_posted, still.credits_pending) == (0, 0, 0)


async def test_more_confirms_at_once_than_pooled_connections_all_complete_on_tigerbeetle(
    database_url: str, tigerbeetle_address: str
) -> None:
    """A confirm holds a pooled connection for its transaction and commits its hold id on another one
    first. Those come from the decisions' own pool: from the same pool, as many confirms as it has
    connections would each wait for a second one for ever (the bound below only ends the test)."""
    small = await create_pool(database_url, min_size=1, max_size=3)
    try:
        async for api in open_api(
            small, database_url, ledger_backend="tigerbeetle", tb_address=tigerbeetle_address
        ):
            payer, payee = await _funded_pair(api, amount=100_000)
            body = {
                "channel": "internal-p2p", "amount": 100, "currency": "THB",
                "payer_account_id": payer, "payee_account_id": payee,
            }  # fmt: skip
            ids = [(await api.client.post("/intents", body)).json()["id"] for _ in range(8)]
            confirms = asyncio.gather(*(api.client.post(f"/intents/{i}/confirm") for i in ids))
            answers = await asyncio.wait_for(confirms, timeout=120)
            assert [a.status_code for a in answers] == [200] * 8, [a.text for a in answers]
            assert [await _status(api, i) for i in ids] == ["confirmed"] * 8
    finally:
        await small.close()


async def test_readyz_reports_the_tigerbeetle_ledger(tb_api: Api) -> None:
    ready = await tb_api.http.get("/readyz")
    assert ready.status_code == 200, ready.text
    assert ready.json()["checks"]["ledger"] == "ok"
    assert ready.json()["checks"]["ledger_backend"] == "tigerbeetle"


async def test_ledger_ops_tell_the_backends_apart(tb_api: Api, pool: asyncpg.Pool) -> None:
    from paymanager.ledger import PostgresLedger

    assert not ledger_ops.joins_transactions(tb_api.payments.ledger)
    assert ledger_ops.joins_transactions(PostgresLedger(pool))


async def test_a_capture_that_crashed_after_deciding_is_finished_with_the_amount_it_decided(
    tb_api: Api,
) -> None:
    api = tb_api
    payer, payee = await _funded_pair(api)
    body = {
        "channel": "internal-p2p", "amount": 1_000, "currency": "THB", "payer_account_id": payer,
        "payee_account_id": payee, "capture_method": "manual",
    }  # fmt: skip
    created = await api.client.post("/intents", body)
    intent_id = created.json()["id"]
    assert (await api.client.post(f"/intents/{intent_id}/confirm")).json()["status"] == "requires_capture"
    api.payments.checkpoint = crash_once_at(resolve.DECIDED)
    with pytest.raises(Crash):
        async with api.payments.pool.acquire() as conn, conn.transaction():
            await capture_intent(api.payments, conn, _shop(api), uuid.UUID(intent_id), 600, [])
    assert await _decision(api, intent_id) == ("post", "settled")
    assert await _status(api, intent_id) == "requires_capture"
    assert not await _ledger_has(api, intent_id, "post.amount")
    # The decided capture wins over a cancel, and over the deadline: the sweep carries it out with
    # the amount decided (not the whole hold, not a void).
    cancel = await api.client.post(f"/intents/{intent_id}/cancel")
    assert (cancel.status_code, cancel.json()["error"]["code"]) == (409, "invalid_transition")
    api.clock.now = datetime.now(UTC) + timedelta(seconds=api.payments.settings.capture_window_sec)
    api.client.clock = lambda: api.clock().timestamp()  # requests signed on the moved clock
    assert (await sweep(api.payments)).captures_expired == 1
    shown = (await api.client.get(f"/intents/{intent_id}")).json()
    assert (shown["status"], shown["amount_captured"], shown["fee_captured"]) == ("settled", 600, 3)
    assert (await api.client.balance(payee))["posted"] == 600
    left = 10_000 - 603
    assert await balance_figures(api.client, payer) == {
        "posted": left, "pending": 0, "available": left,
    }  # fmt: skip
    assert await _settlements(api, intent_id) == ["posted"]
