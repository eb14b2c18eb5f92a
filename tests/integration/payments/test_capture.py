"""Manual capture over the real app and database (and, with TEST_LEDGER_BACKEND=tigerbeetle, a real
TigerBeetle replica): confirm holds and waits, a capture posts part or all of the hold through the
settlement path and releases the rest, and every refusal (twice, too much, too late, the wrong
intent, a cancel first) answers 4xx with nothing written."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from paymanager.application import ledger_ops
from paymanager.application.intents.invoice_sweep import sweep
from paymanager.application.intents.reconcile import reconcile
from paymanager.application.intents.settle import settle
from paymanager.application.refunds.create import REFUND_KIND
from paymanager.application.services.use_cases import create_service
from paymanager.db.pool import create_pool
from paymanager.ledger import PostgresLedger
from tests.integration.payments.conftest import Api, open_api
from tests.support.databases import DatabaseFactory, run_sync
from tests.support.examples import examples
from tests.support.intent_flows import balance_figures, confirmed_manual, funded_payer, intent_body, posted
from tests.support.locks import wait_for_a_waiter_behind
from tests.support.signed_client import SignedClient
from tests.support.waiting import wait_for_lock_waiters, wait_until

WINDOW_SEC = 3_600


# Every test here runs on the PostgreSQL ledger and on a TigerBeetle replica (conftest.py).
pytestmark = pytest.mark.both_ledgers


@pytest.fixture
async def api(
    pool: asyncpg.Pool, database_url: str, ledger_settings: dict[str, object]
) -> AsyncIterator[Api]:
    async for opened in open_api(pool, database_url, capture_window_sec=WINDOW_SEC, **ledger_settings):
        opened.clock.now = datetime.now(UTC)
        _stamp_on_the_test_clock(opened)
        yield opened


def _stamp_on_the_test_clock(api: Api) -> None:
    """Requests signed at the time the server's (moved) clock shows, so they are never stale."""
    for client in (api.admin, api.client):
        client.clock = lambda: api.clock().timestamp()


async def _pair(api: Api, *, merchant: bool = False) -> tuple[str, str]:
    payer = await funded_payer(api.payments, api.admin, api.client)
    payee = await api.client.open_account("merchant" if merchant else "user")
    return payer, payee


async def _row(api: Api, intent_id: str) -> asyncpg.Record:
    row = await api.payments.pool.fetchrow("SELECT * FROM intent WHERE id = $1", uuid.UUID(intent_id))
    assert row is not None
    return row


async def _settlement(api: Api, intent_id: str) -> asyncpg.Record | None:
    return await api.payments.pool.fetchrow(
        "SELECT * FROM settlement WHERE intent_id = $1", uuid.UUID(intent_id)
    )


async def _fee_posted(api: Api, intent_id: str) -> int:
    fee_account = (await _row(api, intent_id))["fee_account_id"]
    return (await ledger_ops.balance(api.payments.ledger, fee_account))["posted"]


async def _capture(api: Api, intent_id: str, payload: Any = None, *, key: str | None = None) -> Any:
    return await api.client.post(f"/intents/{intent_id}/capture", payload, key=key)


async def test_manual_capture_is_refused_on_channels_a_merchant_does_not_capture(api: Api) -> None:
    payer, payee = await _pair(api)
    merchant = await api.client.open_account("merchant")
    payout = {"channel": "ipps-transfer", "amount": 100, "currency": "THB", "payer_account_id": payer,
              "capture_method": "manual"}  # fmt: skip
    top_up = {"channel": "admin-transfer", "amount": 100, "currency": "THB", "payee_account_id": payee,
              "capture_method": "manual"}  # fmt: skip
    refused = [
        await api.client.post("/intents", intent_body("service-transfer", merchant, payee, 100)),
        await api.client.post("/intents", payout),
        await api.admin.post("/intents", top_up),
    ]
    for response in refused:
        assert response.status_code == 422, response.text
        assert response.json()["error"]["code"] == "capture_method_not_allowed"
        assert response.json()["error"]["details"]["allowed"] == ["internal-p2p", "merchant-invoice"]
    for bad in ("Manual", "later", 1, None):
        response = await api.client.post(
            "/intents", intent_body("internal-p2p", payer, payee, 100) | {"capture_method": bad}
        )
        assert response.status_code == 422, (bad, response.text)
    created = await api.payments.pool.fetchval("SELECT count(*) FROM intent WHERE capture_method = 'manual'")
    assert created == 0


async def test_confirm_of_a_manual_intent_holds_and_waits_for_its_capture(api: Api) -> None:
    payer, payee = await _pair(api)
    created = await api.client.post("/intents", intent_body("internal-p2p", payer, payee, 1_000))
    assert created.json()["capture_method"] == "manual"
    assert created.json()["amount_captured"] is None
    view = await confirmed_manual(api.client, payer, payee, 1_000)
    assert (view["status"], view["awaiting"], view["capture_method"]) == (
        "requires_capture",
        "capture",
        "manual",
    )
    deadline = datetime.fromisoformat(view["settle_deadline_at"])
    assert deadline == api.clock.now + timedelta(seconds=WINDOW_SEC)
    assert (await api.client.balance(payer))["available"] == 10_000 - 1_000 - 5
    assert await posted(api.client, payee) == 0
    # No settlement job; neither a settle attempt nor the start-up reconciler settles it.
    jobs = await api.payments.pool.fetchval(
        "SELECT count(*) FROM job WHERE kind = 'intent.settle' AND payload->>'intent_id' = $1", view["id"]
    )
    assert jobs == 0
    async with api.payments.pool.acquire() as conn, conn.transaction():
        assert await settle(api.payments, conn, uuid.UUID(view["id"]), settled_by="test") is None
    report = await reconcile(api.payments, batch_size=10, max_intents=100)
    assert (report.reenqueued, report.captures_expired) == (0, 0)
    shown = (await api.client.get(f"/intents/{view['id']}")).json()
    assert (shown["status"], shown["capture_method"]) == ("requires_capture", "manual")
    listed = (await api.client.get("/intents?status=requires_capture")).json()["data"]
    assert [i["id"] for i in listed] == [view["id"]]


async def test_a_partial_capture_posts_the_captured_amount_and_fee_and_releases_the_rest(api: Api) -> None:
    payer, payee = await _pair(api)
    view = await confirmed_manual(api.client, payer, payee, 1_000)
    fees_before = await _fee_posted(api, view["id"])
    captured = await _capture(api, view["id"], {"amount": 600})
    assert captured.status_code == 200, captured.text
    body = captured.json()
    assert (body["status"], body["amount_captured"], body["fee_captured"]) == ("settled", 600, 3)
    assert (body["amount"], body["fee"]) == (1_000, 5)  # what was authorised stays shown
    # 600 and its 0.5% fee (3) moved; the other 400 and 2 of the fee went back to the payer.
    left = 10_000 - 603
    assert await balance_figures(api.client, payer) == {
        "posted": left, "pending": 0, "available": left,
    }  # fmt: skip
    assert await balance_figures(api.client, payee) == {
        "posted": 600, "pending": 0, "available": 600,
    }  # fmt: skip
    assert await _fee_posted(api, view["id"]) == fees_before + 3
    settlement = await _settlement(api, view["id"])
    assert settlement is not None
    assert settlement["outcome"] == "posted"
    assert settlement["settled_by"] == f"api:{api.client.service_id}"
    captured = await _row(api, view["id"])
    assert (captured["amount_captured"], captured["fee_captured"]) == (600, 3)
    shown = (await api.client.get(f"/intents/{view['id']}")).json()
    assert (shown["status"], shown["amount_captured"], shown["awaiting"]) == ("settled", 600, None)


async def test_a_capture_without_an_amount_posts_the_whole_invoice(api: Api) -> None:
    payer, merchant = await _pair(api, merchant=True)
    view = await confirmed_manual(api.client, payer, merchant, 1_000, channel="merchant-invoice")
    assert view["status"] == "requires_capture"
    captured = await _capture(api, view["id"])
    again = await _capture(api, view["id"], {})
    assert captured.status_code == 200, captured.text
    assert (captured.json()["amount_captured"], captured.json()["fee_captured"]) == (1_000, 10)
    assert again.status_code == 409
    assert await posted(api.client, merchant) == 1_000
    assert await balance_figures(api.client, payer) == {
        "posted": 8_990, "pending": 0, "available": 8_990,
    }  # fmt: skip


async def test_capturing_twice_is_409_and_moves_nothing_more(api: Api) -> None:
    payer, payee = await _pair(api)
    view = await confirmed_manual(api.client, payer, payee, 1_000)
    assert (await _capture(api, view["id"], {"amount": 100})).status_code == 200
    for payload in ({"amount": 100}, {"amount": 900}, None):
        twice = await _capture(api, view["id"], payload)
        assert twice.status_code == 409, twice.text
        assert twice.json()["error"]["code"] == "already_captured"
        assert twice.json()["error"]["details"]["amount_captured"] == 100
    assert await posted(api.client, payee) == 100
    assert (await _row(api, view["id"]))["version"] == 3


async def test_capture_above_the_hold_is_422_naming_the_capturable_amount_and_writes_nothing(
    api: Api,
) -> None:
    payer, payee = await _pair(api)
    view = await confirmed_manual(api.client, payer, payee, 1_000)
    over = await _capture(api, view["id"], {"amount": 1_001})
    assert over.status_code == 422, over.text
    assert over.json()["error"]["code"] == "capture_exceeds_capturable"
    assert over.json()["error"]["details"] == {"capturable": 1_000, "requested": 1_001}
    bad_bodies: list[Any] = [
        {"amount": 0}, {"amount": -5}, {"amount": "10"}, {"amount": 1.5}, {"amount": True},
        {"amount": 10**16}, {"nope": 1}, [1], "all",
    ]  # fmt: skip
    for bad in bad_bodies:
        response = await _capture(api, view["id"], bad)
        assert response.status_code == 422, (bad, response.text)
        assert set(response.json()) == {"error"}
    assert (await _capture(api, str(uuid.uuid4()), {"amount": 1})).status_code == 404
    row = await _row(api, view["id"])
    assert (row["status"], row["version"]) == ("requires_capture", 2)
    assert await _settlement(api, view["id"]) is None
    assert (await api.client.balance(payer))["available"] == 10_000 - 1_005


async def test_another_service_cannot_capture_my_intent(api: Api, pool: asyncpg.Pool) -> None:
    payer, payee = await _pair(api)
    view = await confirmed_manual(api.client, payer, payee, 1_000)
    async with pool.acquire() as conn:
        stranger, secret = await create_service(conn, api.payments.box, "stranger", admin=False)
    other = SignedClient(api.http, stranger.id, secret)
    other.clock = api.client.clock
    refused = await other.post(f"/intents/{view['id']}/capture", {"amount": 1})
    assert refused.status_code == 404, refused.text
    assert (await _row(api, view["id"]))["status"] == "requires_capture"


async def test_capture_of_an_automatic_unconfirmed_or_cancelled_intent_is_409(api: Api) -> None:
    payer, payee = await _pair(api)
    automatic = await api.client.post(
        "/intents", intent_body("internal-p2p", payer, payee, 100, capture_method="automatic")
    )
    await api.client.post(f"/intents/{automatic.json()['id']}/confirm")
    unconfirmed = await api.client.post("/intents", intent_body("internal-p2p", payer, payee, 100))
    cancelled = await confirmed_manual(api.client, payer, payee, 100)
    assert (await api.client.post(f"/intents/{cancelled['id']}/cancel")).status_code == 200
    for intent_id, status in (
        (automatic.json()["id"], "confirmed"), (unconfirmed.json()["id"], "created"),
        (cancelled["id"], "cancelled"),
    ):  # fmt: skip
        refused = await _capture(api, intent_id, {"amount": 50})
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"]["code"] == "intent_not_capturable"
        assert refused.json()["error"]["details"]["status"] == status
        assert (await _row(api, intent_id))["status"] == status
    assert await posted(api.client, payee) == 0


async def test_a_capture_after_the_deadline_is_409_and_the_hold_is_voided(api: Api) -> None:
    payer, payee = await _pair(api)
    view = await confirmed_manual(api.client, payer, payee, 1_000)
    assert api.clock.now is not None
    api.clock.now += timedelta(seconds=WINDOW_SEC)
    late = await _capture(api, view["id"], {"amount": 500})
    assert late.status_code == 409, late.text
    assert late.json()["error"]["code"] == "capture_expired"
    assert late.json()["error"]["details"]["intent"]["status"] == "expired"
    row = await _row(api, view["id"])
    assert (row["status"], row["amount_captured"]) == ("expired", None)
    settlement = await _settlement(api, view["id"])
    assert settlement is not None
    assert settlement["outcome"] == "voided"
    assert await balance_figures(api.client, payer) == {
        "posted": 10_000, "pending": 0, "available": 10_000,
    }  # fmt: skip
    assert await posted(api.client, payee) == 0
    again = await _capture(api, view["id"], {"amount": 500})
    assert (again.status_code, again.json()["error"]["code"]) == (409, "capture_expired")


async def test_the_sweep_expires_uncaptured_holds_past_their_deadline_and_no_others(api: Api) -> None:
    payer, payee = await _pair(api)
    due = await confirmed_manual(api.client, payer, payee, 1_000)
    assert api.clock.now is not None
    api.clock.now += timedelta(seconds=WINDOW_SEC // 2)
    fresh = await confirmed_manual(api.client, payer, payee, 2_000)
    api.clock.now += timedelta(seconds=WINDOW_SEC // 2)
    report = await sweep(api.payments)
    assert report.captures_expired == 1
    assert (await _row(api, due["id"]))["status"] == "expired"
    assert (await _row(api, fresh["id"]))["status"] == "requires_capture"
    assert (await api.client.balance(payer))["available"] == 10_000 - 2_000 - 10
    late = await _capture(api, due["id"], {"amount": 1})
    assert (late.status_code, late.json()["error"]["code"]) == (409, "capture_expired")
    assert (await _capture(api, fresh["id"])).status_code == 200
    assert (await sweep(api.payments)).captures_expired == 0


async def test_cancel_voids_an_uncaptured_hold_and_is_409_once_captured(api: Api) -> None:
    payer, payee = await _pair(api)
    held = await confirmed_manual(api.client, payer, payee, 1_000)
    cancelled = await api.client.post(f"/intents/{held['id']}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "cancelled"
    assert (await api.client.balance(payer))["available"] == 10_000
    captured = await confirmed_manual(api.client, payer, payee, 1_000)
    assert (await _capture(api, captured["id"], {"amount": 700})).status_code == 200
    late = await api.client.post(f"/intents/{captured['id']}/cancel")
    assert late.status_code == 409, late.text
    assert late.json()["error"]["code"] == "invalid_transition"
    assert await posted(api.client, payee) == 700


@pytest.mark.parametrize("first", ["capture", "cancel"])
async def test_a_capture_racing_a_cancel_the_first_in_line_wins(api: Api, first: str) -> None:
    payer, payee = await _pair(api)
    view = await confirmed_manual(api.client, payer, payee, 1_000)
    requests = {
        "capture": lambda: _capture(api, view["id"], {"amount": 400}),
        "cancel": lambda: api.client.post(f"/intents/{view['id']}/cancel"),
    }
    second = "cancel" if first == "capture" else "capture"
    async with api.payments.pool.acquire() as holder:
        transaction = holder.transaction()
        await transaction.start()
        await holder.execute("SELECT 1 FROM intent WHERE id = $1 FOR UPDATE", uuid.UUID(view["id"]))
        leading = asyncio.create_task(requests[first]())
        await wait_for_a_waiter_behind(api.payments.pool, holder.get_server_pid())
        trailing = asyncio.create_task(requests[second]())
        await wait_for_lock_waiters(api.payments.pool, 2)
        await transaction.rollback()
        won, lost = await leading, await trailing
    assert won.status_code == 200, won.text
    assert lost.status_code == 409, lost.text
    status = (await _row(api, view["id"]))["status"]
    if first == "capture":
        assert (status, lost.json()["error"]["code"]) == ("settled", "invalid_transition")
        assert await posted(api.client, payee) == 400
    else:
        assert (status, lost.json()["error"]["code"]) == ("cancelled", "intent_not_capturable")
        assert await posted(api.client, payee) == 0
        assert (await api.client.balance(payer))["available"] == 10_000


async def test_a_replayed_capture_answers_the_first_response_and_captures_once(api: Api) -> None:
    payer, payee = await _pair(api)
    view = await confirmed_manual(api.client, payer, payee, 1_000)
    first = await _capture(api, view["id"], {"amount": 250}, key="capture-1")
    again = await _capture(api, view["id"], {"amount": 250}, key="capture-1")
    assert again.status_code == 200
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    changed = await _capture(api, view["id"], {"amount": 300}, key="capture-1")
    assert changed.status_code == 409
    assert changed.json()["error"]["code"] == "idempotency_key_reused"
    assert await posted(api.client, payee) == 250


async def test_a_replayed_confirm_shows_the_intent_awaiting_its_capture(api: Api) -> None:
    payer, payee = await _pair(api)
    created = await api.client.post("/intents", intent_body("internal-p2p", payer, payee, 1_000))
    intent_id = created.json()["id"]
    confirmed = await api.client.post(f"/intents/{intent_id}/confirm", key="confirm-1")
    assert (await _capture(api, intent_id, {"amount": 10})).status_code == 200
    replayed = await api.client.post(f"/intents/{intent_id}/confirm", key="confirm-1")
    assert replayed.headers["Idempotent-Replayed"] == "true"
    assert replayed.json() == confirmed.json()
    assert replayed.json()["status"] == "requires_capture"


async def test_a_partially_captured_intent_refunds_at_most_the_captured_amount(api: Api) -> None:
    payer, merchant = await _pair(api, merchant=True)
    view = await confirmed_manual(api.client, payer, merchant, 1_000, channel="merchant-invoice")
    assert (await _capture(api, view["id"], {"amount": 600})).status_code == 200
    over = await api.client.post(f"/intents/{view['id']}/refunds", {"amount": 601})
    assert over.status_code == 422, over.text
    assert over.json()["error"]["details"]["refundable"] == 600
    whole = await api.client.post(f"/intents/{view['id']}/refunds", {})
    assert whole.status_code == 201, whole.text
    # The whole captured amount, and the whole fee posted with it (6, 1% of 600), not the fee held.
    assert (whole.json()["amount"], whole.json()["fee_refunded"]) == (600, 6)
    jobs = await api.payments.pool.fetchval("SELECT count(*) FROM job WHERE kind = $1", REFUND_KIND)
    assert jobs == 1


# --- a property over random sequences of captures, refunds, cancels and expiries -------------------

Op = tuple[str, int | None]
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("capture"), st.none() | st.integers(-1, 1_300)),
        st.tuples(st.just("refund"), st.none() | st.integers(0, 1_300)),
        st.tuples(st.just("cancel"), st.none()),
        st.tuples(st.just("expire"), st.none()),
    ),
    min_size=1,
    max_size=7,
)


@dataclass
class Model:
    """What the API must answer, for one manual intent of `amount` held at confirm."""

    amount: int
    status: str = "requires_capture"
    captured: int = 0
    fee_captured: int = 0
    refunded: int = 0
    fee_refunded: int = 0

    def expected(self, op: str, value: int | None) -> int:
        """The status code `op` must get, the model moved as the API must move."""
        if op == "capture":
            if value is not None and value < 1:
                return 422  # the body's schema, before any state is looked at
            if self.status != "requires_capture":
                return 409
            if value is not None and value > self.amount:
                return 422
            self.status, self.captured = "settled", self.amount if value is None else value
            return 200
        if op == "refund":
            left = self.captured - self.refunded
            if self.status != "settled":
                return 409 if value is None or value >= 1 else 422
            if value is not None and value < 1:
                return 422
            if (value if value is not None else left) > left or left == 0:
                return 422
            self.refunded += left if value is None else value
            return 201
        if op == "cancel":
            if self.status != "requires_capture":
                return 409
            self.status = "cancelled"
            return 200
        if self.status == "requires_capture":
            self.status = "expired"
        return 200


async def _apply(api: Api, model: Model, intent_id: str, op: str, value: int | None) -> None:
    wanted = model.expected(op, value)
    # No amount: a capture without a body, a refund of `{}` (its route takes a body); both mean "all".
    payload: dict[str, int] | None = None if value is None else {"amount": value}
    if op == "refund" and payload is None:
        payload = {}
    if op == "expire":
        assert api.clock.now is not None
        api.clock.now += timedelta(seconds=WINDOW_SEC)
        await sweep(api.payments)
        got = 200
    elif op == "cancel":
        got = (await api.client.post(f"/intents/{intent_id}/cancel")).status_code
    else:
        response = await api.client.post(
            f"/intents/{intent_id}/{op}" + ("s" if op == "refund" else ""), payload
        )
        got = response.status_code
        if got == 200 and op == "capture":
            model.fee_captured = response.json()["fee_captured"]
        if got == 201:
            model.fee_refunded += response.json()["fee_refunded"]
    assert got == wanted, (op, value, model)
    assert (await _row(api, intent_id))["status"] == model.status


async def _run_sequence(
    factory: DatabaseFactory, overrides: dict[str, object], channel: str, amount: int, ops: list[Op]
) -> None:
    """One example on a database of its own (the API's fixture services have fixed names)."""
    url = await factory.create()
    try:
        await _run_on(url, overrides, channel, amount, ops)
    finally:
        await factory.drop(url)


async def _run_on(url: str, overrides: dict[str, object], channel: str, amount: int, ops: list[Op]) -> None:
    pool = await create_pool(url, min_size=1, max_size=8)
    opened = open_api(pool, url, capture_window_sec=WINDOW_SEC, worker_roles="api,outbox-worker", **overrides)
    api = await opened.__anext__()
    try:
        api.clock.now = datetime.now(UTC)
        _stamp_on_the_test_clock(api)
        payer = await funded_payer(api.payments, api.admin, api.client, amount=10_000)
        payee = await api.client.open_account("merchant" if channel == "merchant-invoice" else "user")
        view = await confirmed_manual(api.client, payer, payee, amount, channel=channel)
        model = Model(amount)
        # Past the deadline at the end, so an intent the ops left uncaptured ends too (its hold voided).
        for op, value in [*ops, ("expire", None)]:
            await _apply(api, model, view["id"], op, value)
        await wait_until(lambda: _refunds_done(api, view["id"]))
        row = await _row(api, view["id"])
        assert (row["amount_captured"] or 0) == model.captured <= amount
        assert (row["fee_captured"] or 0) == model.fee_captured <= row["fee"]
        assert await balance_figures(api.client, payer) == {
            "pending": 0,
            "posted": 10_000 - model.captured - model.fee_captured + model.refunded + model.fee_refunded,
            "available": 10_000 - model.captured - model.fee_captured + model.refunded + model.fee_refunded,
        }  # fmt: skip
        assert await posted(api.client, payee) == model.captured - model.refunded
        if isinstance(api.payments.ledger, PostgresLedger):
            verification = await api.payments.ledger.verify()
            assert verification.ok, verification.violations
    finally:
        await opened.aclose()
        await pool.close()


async def _refunds_done(api: Api, intent_id: str) -> bool:
    pending = await api.payments.pool.fetchval(
        "SELECT count(*) FROM refund WHERE intent_id = $1 AND status = 'pending'", uuid.UUID(intent_id)
    )
    return bool(pending == 0)


@settings(
    max_examples=examples(12), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    channel=st.sampled_from(["internal-p2p", "merchant-invoice"]),
    amount=st.integers(1, 1_200),
    ops=OPS,
)
def test_random_captures_refunds_cancels_and_expiries_never_exceed_the_hold_and_verify(
    ledger_settings: dict[str, object],
    database_factory: DatabaseFactory,
    channel: str,
    amount: int,
    ops: list[Op],
) -> None:
    run_sync(_run_sequence(database_factory, ledger_settings, channel, amount, ops))
