"""Intents over the real app and database: flows, refusals, policies, channels, pagination."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
import orjson
import pytest

from paymanager.application.idempotency.unit_of_work import LEDGER_CONFLICT_RETRIES_MAX
from paymanager.application.ids import transfer_id
from paymanager.application.intents.confirm import PAYOUT_HOLD_TIMEOUT_SEC
from paymanager.application.intents.events import NOTIFY_CHANNEL, event_payload
from paymanager.application.intents.reconcile import reconcile
from paymanager.application.intents.settle import settle
from paymanager.application.intents.store import Intent
from paymanager.application.intents.store import Q as INTENT_QUERIES
from paymanager.jobs import JOB_AVAILABLE_CHANNEL
from paymanager.ledger import LedgerConflictError, Transfer
from tests.integration.payments.conftest import Api
from tests.support.ledger_holds import expire_holds_in_one_second, wait_until_released
from tests.support.locks import wait_for_a_waiter_behind
from tests.support.signed_client import SignedClient
from tests.support.waiting import wait_until

pytestmark = pytest.mark.both_ledgers
CONFLICTS = "ledger conflicts (LedgerConflictError) are the PostgreSQL ledger's"


async def _settle(api: Api, intent_id: str) -> None:
    async with api.payments.pool.acquire() as conn, conn.transaction():
        await settle(api.payments, conn, uuid.UUID(intent_id), settled_by="test")


async def _funded_pair(api: Api, amount: int = 10_000) -> tuple[str, str]:
    payer = await api.client.open_account()
    payee = await api.client.open_account()
    funding = await api.admin.fund(payer, amount)
    await _settle(api, funding["id"])
    return payer, payee


def _p2p(payer: str, payee: str, amount: int) -> dict[str, object]:
    return {
        "channel": "internal-p2p", "amount": amount, "currency": "THB",
        "payer_account_id": payer, "payee_account_id": payee,
    }  # fmt: skip


async def test_p2p_quote_create_confirm_settle_moves_amount_and_fee(api: Api) -> None:
    payer, payee = await _funded_pair(api)
    quote = await api.client.post(
        "/intents/quote", {"channel": "internal-p2p", "amount": 2_000, "currency": "THB"}
    )
    assert quote.status_code == 200, quote.text
    fee = quote.json()["fee"]
    assert quote.json()["total"] == 2_000 + fee
    created = await api.client.post("/intents", _p2p(payer, payee, 2_000))
    assert created.status_code == 201, created.text
    assert created.json()["status"] == "created"
    assert created.json()["fee"] == fee
    confirmed = await api.client.post(f"/intents/{created.json()['id']}/confirm")
    assert confirmed.json()["status"] == "confirmed"
    held = await api.client.balance(payer)
    assert held["available"] == 10_000 - 2_000 - fee
    assert held["posted"] == 10_000
    await _settle(api, created.json()["id"])
    final = await api.client.get(f"/intents/{created.json()['id']}")
    assert final.json()["status"] == "settled"
    assert (await api.client.balance(payer))["posted"] == 10_000 - 2_000 - fee
    assert (await api.client.balance(payee))["posted"] == 2_000
    async with api.payments.pool.acquire() as conn:
        row = await conn.fetchrow("SELECT * FROM settlement WHERE intent_id = $1::uuid", created.json()["id"])
    assert row["outcome"] == "posted"


async def test_settling_twice_settles_once(api: Api) -> None:
    payer, payee = await _funded_pair(api)
    created = await api.client.post("/intents", _p2p(payer, payee, 1_000))
    await api.client.post(f"/intents/{created.json()['id']}/confirm")
    await _settle(api, created.json()["id"])
    await _settle(api, created.json()["id"])
    assert (await api.client.balance(payee))["posted"] == 1_000


async def test_a_hold_the_ledger_expired_before_settlement_fails_the_intent_and_moves_no_money(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    payer, payee = await _funded_pair(api)
    expire_holds_in_one_second(api.payments, monkeypatch)
    created = await api.client.post("/intents", _p2p(payer, payee, 1_000))
    confirmed = await api.client.post(f"/intents/{created.json()['id']}/confirm")
    assert confirmed.json()["status"] == "confirmed", confirmed.text
    # The ledger's own timeout passes first (settlement stalled past it): the hold is released.
    await wait_until_released(api.payments, uuid.UUID(payer))
    await _settle(api, created.json()["id"])
    final = (await api.client.get(f"/intents/{created.json()['id']}")).json()
    assert (final["status"], final["failure_reason"]) == (
        "failed", "the ledger expired the hold before settlement",
    )  # fmt: skip
    async with api.payments.pool.acquire() as conn:
        outcome = await conn.fetchval(
            "SELECT outcome FROM settlement WHERE intent_id = $1::uuid", final["id"]
        )
    assert outcome == "voided"
    assert await api.client.balance(payer) == {
        "account_id": payer, "ledger_account_id": str(uuid.UUID(payer).int),
        "currency": "THB", "posted": 10_000, "pending": 0, "available": 10_000,
    }  # fmt: skip
    assert (await api.client.balance(payee))["posted"] == 0


async def test_insufficient_funds_answers_422_and_changes_nothing(api: Api) -> None:
    payer, payee = await _funded_pair(api, amount=1_000)
    created = await api.client.post("/intents", _p2p(payer, payee, 5_000))
    refused = await api.client.post(f"/intents/{created.json()['id']}/confirm")
    assert refused.status_code == 422
    assert refused.json()["error"]["code"] == "insufficient_funds"
    assert (await api.client.get(f"/intents/{created.json()['id']}")).json()["status"] == "created"
    assert await api.client.balance(payer) == {
        "account_id": payer, "ledger_account_id": str(uuid.UUID(payer).int),
        "currency": "THB", "posted": 1_000, "pending": 0, "available": 1_000,
    }  # fmt: skip


async def test_cancel_before_confirm_ends_it_and_after_confirm_releases_the_hold(api: Api) -> None:
    payer, payee = await _funded_pair(api)
    early = await api.client.post("/intents", _p2p(payer, payee, 1_000))
    cancelled = await api.client.post(f"/intents/{early.json()['id']}/cancel")
    assert cancelled.json()["status"] == "cancelled"
    late = await api.client.post("/intents", _p2p(payer, payee, 3_000))
    await api.client.post(f"/intents/{late.json()['id']}/confirm")
    assert (await api.client.balance(payer))["available"] < 7_000
    voided = await api.client.post(f"/intents/{late.json()['id']}/cancel")
    assert voided.json()["status"] == "cancelled"
    assert (await api.client.balance(payer))["available"] == 10_000
    await _settle(api, late.json()["id"])
    assert (await api.client.balance(payee))["posted"] == 0
    again = await api.client.post(f"/intents/{late.json()['id']}/confirm")
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "invalid_transition"


async def test_a_cancel_racing_a_settlement_waits_for_it_and_answers_409_invalid_transition(
    api: Api,
) -> None:
    payer, payee = await _funded_pair(api)
    created = await api.client.post("/intents", _p2p(payer, payee, 1_000))
    intent_id = created.json()["id"]
    await api.client.post(f"/intents/{intent_id}/confirm")
    async with api.payments.pool.acquire() as settling:
        transaction = settling.transaction()
        await transaction.start()
        # The settlement has locked the intent, posted its holds and ended it, not yet committed.
        await settle(api.payments, settling, uuid.UUID(intent_id), settled_by="test")
        cancel = asyncio.create_task(api.client.post(f"/intents/{intent_id}/cancel"))
        try:
            await wait_for_a_waiter_behind(api.payments.pool, settling.get_server_pid())
        finally:
            await transaction.commit()
    cancelled = await cancel
    assert cancelled.status_code == 409, cancelled.text
    assert cancelled.json()["error"]["code"] == "invalid_transition"
    assert (await api.client.get(f"/intents/{intent_id}")).json()["status"] == "settled"
    assert (await api.client.balance(payee))["posted"] == 1_000


async def test_policy_refusal_names_the_rule(api: Api) -> None:
    payer, payee = await _funded_pair(api)
    put = await api.admin.post("/policies", {"channel": "internal-p2p", "max_amount": 500})
    assert put.status_code == 200, put.text
    refused = await api.client.post("/intents", _p2p(payer, payee, 501))
    assert refused.status_code == 422
    assert refused.json()["error"]["code"] == "policy_violation"
    assert refused.json()["error"]["details"]["rule"] == "max_amount"
    assert (await api.client.post("/intents", _p2p(payer, payee, 500))).status_code == 201


async def test_daily_volume_counts_earlier_intents_of_the_payer(api: Api) -> None:
    payer, payee = await _funded_pair(api)
    await api.admin.post("/policies", {"channel": "internal-p2p", "daily_volume_per_account": 1_000})
    assert (await api.client.post("/intents", _p2p(payer, payee, 600))).status_code == 201
    refused = await api.client.post("/intents", _p2p(payer, payee, 600))
    assert refused.json()["error"]["details"]["rule"] == "daily_volume_per_account"


async def test_opposite_payments_under_a_daily_volume_policy_do_not_deadlock_into_500(api: Api) -> None:
    # A pays B while B pays A. With a daily-volume policy each create locks its payer's account row
    # FOR UPDATE (the volume check), then inserts an intent whose foreign key takes FOR KEY SHARE on
    # the payee's row, which the other transaction may hold FOR UPDATE: that must not deadlock.
    a, b = await _funded_pair(api)
    await api.admin.fund(b, 10_000)
    put = await api.admin.post("/policies", {"channel": "internal-p2p", "daily_volume_per_account": 10**9})
    assert put.status_code == 200, put.text
    # A client that gets the app's 500 as a response instead of the exception re-raised.
    transport = httpx.ASGITransport(app=api.http._transport.app, raise_app_exceptions=False)  # type: ignore[attr-defined]
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        client = SignedClient(http, api.client.service_id, api.client.secret)
        requests = []
        for _ in range(6):
            requests.append(client.post("/intents", _p2p(a, b, 1)))
            requests.append(client.post("/intents", _p2p(b, a, 1)))
        responses = await asyncio.gather(*requests)
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [201] * len(requests), [r.text for r in responses if r.status_code != 201][:2]


async def test_service_policy_applies_only_to_that_service(api: Api) -> None:
    await api.admin.post(
        "/policies", {"channel": "internal-p2p", "service_id": api.client.service_id, "currencies": ["USD"]}
    )
    payer, payee = await _funded_pair(api)
    refused = await api.client.post("/intents", _p2p(payer, payee, 100))
    assert refused.json()["error"]["details"]["rule"] == "currencies"
    listed = await api.admin.get("/policies")
    assert listed.json()["data"][0]["service_id"] == api.client.service_id


async def test_admin_transfer_needs_the_admin_scope(api: Api) -> None:
    account = await api.client.open_account()
    refused = await api.client.post(
        "/intents", {"channel": "admin-transfer", "amount": 1, "currency": "THB", "payee_account_id": account}
    )
    assert refused.status_code == 403


async def test_ipps_transfer_confirm_writes_its_psp_transaction_and_job(api: Api) -> None:
    payer, _ = await _funded_pair(api)
    created = await api.client.post(
        "/intents",
        {"channel": "ipps-transfer", "amount": 1_000, "currency": "THB", "payer_account_id": payer},
    )
    assert created.status_code == 201, created.text
    confirmed = await api.client.post(f"/intents/{created.json()['id']}/confirm")
    assert confirmed.json()["status"] == "confirmed"
    assert confirmed.json()["awaiting"] == "psp"
    async with api.payments.pool.acquire() as conn:
        settle_jobs = await conn.fetchval(
            "SELECT count(*) FROM job WHERE payload->>'intent_id' = $1", created.json()["id"]
        )
        tx = await conn.fetchrow("SELECT * FROM psp_tx WHERE intent_id = $1", uuid.UUID(created.json()["id"]))
        payout_jobs = await conn.fetch(
            "SELECT queue FROM job WHERE kind = 'psp.payout' AND payload->>'psp_tx_id' = $1", str(tx["id"])
        )
        hold_id = await conn.fetchval("SELECT hold_id FROM intent WHERE id = $1::uuid", created.json()["id"])
    (hold,) = await api.payments.ledger.lookup_transfers([transfer_id(hold_id, "hold.amount")])
    assert settle_jobs == 0
    assert tx["state"] == "NEW"
    # The payout's hold outlives any wait for the PSP (a manual review included).
    assert hold.timeout == PAYOUT_HOLD_TIMEOUT_SEC
    assert [job["queue"] for job in payout_jobs] == ["psp.ipps"]
    shown = await api.client.get(f"/intents/{created.json()['id']}")
    assert shown.json()["psp"]["state"] == "NEW"
    refused = await api.client.post(f"/intents/{created.json()['id']}/cancel")
    assert refused.status_code == 409, refused.text


async def test_merchant_invoice_cannot_be_confirmed_after_it_expired(api: Api) -> None:
    payer = await api.client.open_account()
    merchant = await api.client.open_account(kind="merchant")
    invoice = await api.client.post(
        "/intents",
        {"channel": "merchant-invoice", "amount": 100, "currency": "THB", "payer_account_id": payer,
         "payee_account_id": merchant, "expires_in_sec": 60},
    )  # fmt: skip
    assert invoice.status_code == 201, invoice.text
    assert invoice.json()["expires_at"] is not None
    api.clock.now = datetime.now(UTC) + timedelta(seconds=61)
    refused = await api.client.request(
        "POST", f"/intents/{invoice.json()['id']}/confirm", timestamp=int(api.clock.now.timestamp())
    )
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "intent_expired"
    assert refused.json()["error"]["details"]["intent"]["status"] == "expired"
    api.clock.now = None
    assert (await api.client.get(f"/intents/{invoice.json()['id']}")).json()["status"] == "expired"


async def test_reconciler_expires_invoices_left_past_their_expiry(api: Api) -> None:
    payer = await api.client.open_account()
    merchant = await api.client.open_account(kind="merchant")
    body = {
        "channel": "merchant-invoice", "amount": 100, "currency": "THB", "payer_account_id": payer,
        "payee_account_id": merchant, "expires_in_sec": 60,
    }  # fmt: skip
    due = (await api.client.post("/intents", body)).json()["id"]
    fresh = (await api.client.post("/intents", body | {"expires_in_sec": 3_600})).json()["id"]
    api.clock.now = datetime.now(UTC) + timedelta(seconds=120)
    report = await reconcile(api.payments, batch_size=1, max_intents=100)
    api.clock.now = None
    assert report.expired == 1
    assert (await api.client.get(f"/intents/{due}")).json()["status"] == "expired"
    assert (await api.client.get(f"/intents/{fresh}")).json()["status"] == "created"


async def test_bad_input_is_4xx_with_the_error_shape(api: Api) -> None:
    account = await api.client.open_account()
    cases = [
        {"channel": "wire", "amount": 1, "currency": "THB"},
        {"channel": "internal-p2p", "amount": 1.5, "currency": "THB"},
        {"channel": "internal-p2p", "amount": "1", "currency": "THB"},
        {"channel": "internal-p2p", "amount": 1, "currency": "ZZZ", "payer_account_id": account},
        {
            "channel": "internal-p2p",
            "amount": 1,
            "currency": "USD",
            "payer_account_id": account,
            "payee_account_id": account,
        },
        {
            "channel": "internal-p2p",
            "amount": 1,
            "currency": "THB",
            "payer_account_id": account,
            "payee_account_id": account,
        },
        {"channel": "internal-p2p", "amount": 1, "currency": "THB", "description": "nul\u0000"},
    ]
    for body in cases:
        response = await api.client.post("/intents", body)
        assert 400 <= response.status_code < 500, (body, response.text)
        assert set(response.json()["error"]) == {"code", "message", "details"}
    unknown = await api.client.get(f"/intents/{uuid.uuid4()}")
    assert unknown.status_code == 404


async def test_other_services_cannot_see_or_spend_my_accounts(api: Api) -> None:
    mine = await api.client.open_account()
    theirs = await api.admin.open_account()
    spend = await api.client.post("/intents", _p2p(theirs, mine, 1))
    assert spend.status_code == 404
    created = await api.admin.post("/intents", _p2p(theirs, mine, 1))
    assert (await api.client.get(f"/intents/{created.json()['id']}")).status_code == 404


async def test_a_merchant_invoice_cannot_debit_another_services_user_account(api: Api) -> None:
    # Every channel requires the payer to be the caller's own account, merchant-invoice too: were it
    # to check only that the payee (the merchant) is, a service could invoice any user account of any
    # other service and confirm the invoice itself, a pull of their money.
    victim = await api.admin.open_account()  # a user account of another service
    funding = await api.admin.fund(victim, 5_000)
    await _settle(api, funding["id"])
    merchant = await api.client.open_account(kind="merchant")
    invoice = await api.client.post(
        "/intents",
        {"channel": "merchant-invoice", "amount": 4_000, "currency": "THB", "payer_account_id": victim,
         "payee_account_id": merchant},
    )  # fmt: skip
    confirmed = None
    if invoice.status_code == 201:
        confirmed = await api.client.post(f"/intents/{invoice.json()['id']}/confirm")
        if confirmed.status_code == 200:
            await _settle(api, invoice.json()["id"])
    assert (await api.admin.balance(victim))["posted"] == 5_000, "another service took the victim's money"
    assert invoice.status_code == 404, (invoice.text, confirmed and confirmed.text)


async def test_list_pages_newest_first_with_a_cursor(api: Api) -> None:
    payer, payee = await _funded_pair(api)
    ids = [(await api.client.post("/intents", _p2p(payer, payee, 10 + i))).json()["id"] for i in range(5)]
    first = (await api.client.get("/intents?limit=2&channel=internal-p2p")).json()
    assert [i["id"] for i in first["data"]] == ids[::-1][:2]
    assert first["has_more"] is True
    second = (
        await api.client.get(f"/intents?limit=2&channel=internal-p2p&starting_after={first['next_cursor']}")
    ).json()
    assert [i["id"] for i in second["data"]] == ids[::-1][2:4]
    by_status = (await api.client.get("/intents?status=settled&limit=10")).json()
    assert by_status["data"] == []


async def test_a_services_list_reads_its_index_backward_newest_first(api: Api) -> None:
    """intent_service_idx is ascending by id (so new intents land at its right edge, migration 0354):
    a service's list, newest first, walks it backward instead of sorting the service's intents."""
    payer, payee = await _funded_pair(api)
    for amount in (10, 11, 12):
        await api.client.post("/intents", _p2p(payer, payee, amount))
    async with api.payments.pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL enable_seqscan = off")
        await conn.execute("SET LOCAL enable_bitmapscan = off")
        explain = await conn.prepare("EXPLAIN " + INTENT_QUERIES["intent_list"])
        args = (api.client.service_id, None, None, None, None, 10)
        plan = "\n".join(row[0] for row in await explain.fetch(*args))
    assert "Index Scan Backward using" in plan, plan
    assert "hashtext_id_idx" in plan, plan
    assert "Sort" not in plan, plan


async def test_history_lists_the_accounts_intents(api: Api) -> None:
    payer, payee = await _funded_pair(api)
    await api.client.post("/intents", _p2p(payer, payee, 10))
    history = (await api.client.get(f"/accounts/{payer}/history")).json()
    assert [i["channel"] for i in history["data"]] == ["internal-p2p", "admin-transfer"]


async def test_account_history_does_not_show_another_services_intent(api: Api) -> None:
    # GET /intents/{id} answers another service's intent as unknown "so its existence does not
    # leak"; the history of an account that intent pays into must not show it whole either (its
    # metadata, description, the other service's payer account).
    mine = await api.client.open_account()
    theirs = await api.admin.open_account()
    funding = await api.admin.fund(theirs, 1_000)
    await _settle(api, funding["id"])
    secret = {"internal_order": "A-17", "customer_email": "someone@example.com"}
    created = await api.admin.post("/intents", _p2p(theirs, mine, 10) | {"metadata": secret})
    assert created.status_code == 201, created.text
    assert (await api.client.get(f"/intents/{created.json()['id']}")).status_code == 404
    history = (await api.client.get(f"/accounts/{mine}/history")).json()["data"]
    leaked = [i for i in history if i["id"] == created.json()["id"]]
    assert not leaked or leaked[0]["metadata"] != secret, leaked


async def test_schema_refuses_a_transition_the_state_machine_does_not_draw(api: Api) -> None:
    payer, payee = await _funded_pair(api)
    created = await api.client.post("/intents", _p2p(payer, payee, 10))
    async with api.payments.pool.acquire() as conn:
        with pytest.raises(asyncpg.CheckViolationError):
            await conn.execute(
                "UPDATE intent SET status = 'settled', version = version + 1, finished_at = now() "
                "WHERE id = $1::uuid",
                created.json()["id"],
            )


async def test_unstorable_text_and_json_are_422_not_500(api: Api) -> None:
    account = await api.client.open_account()
    prefix = f'{{"channel": "internal-p2p", "amount": 1, "currency": "THB", "payer_account_id": "{account}"'
    bodies = [
        prefix + ', "description": "\\ud800"}',
        prefix + ', "metadata": {"big": 1180591620717411303424}}',
        prefix + ', "metadata": {"k\\ud800": 1}}',
        prefix + ', "metadata": ' + "[" * 300 + "]" * 300 + "}",
    ]
    for text in bodies:
        body = text.encode()
        headers = api.client.headers_for("POST", "/intents", body)
        headers |= {"Idempotency-Key": str(uuid.uuid4()), "Content-Type": "application/json"}
        response = await api.http.post("/intents", content=body, headers=headers)
        assert response.status_code == 422, (text[:80], response.text)


async def test_channels_lists_the_seven_with_their_fee_rules(api: Api) -> None:
    listed = (await api.client.get("/channels")).json()["data"]
    by_name = {c["name"]: c for c in listed}
    assert set(by_name) == {
        "internal-p2p",
        "ipps-transfer",
        "qp-transfer",
        "wise-transfer",
        "service-transfer",
        "admin-transfer",
        "merchant-invoice",
    }
    assert by_name["admin-transfer"]["required_scope"] == "admin"
    for psp in ("ipps", "qp", "wise"):
        payout = by_name[f"{psp}-transfer"]
        assert (payout["settles_on_confirm"], payout["psp"]) == (False, psp)
        assert payout["payee_system_account"] == f"nostro.{psp}"
        assert payout["fee"] == by_name["ipps-transfer"]["fee"]
    assert by_name["internal-p2p"]["psp"] is None
    assert by_name["merchant-invoice"]["expires"] is True
    assert by_name["internal-p2p"]["fee"]["rate_bps"] == 50


async def test_confirm_refusals_and_its_notified_event(api: Api, database_url: str) -> None:
    """The one-statement confirm and its locking fallback answer alike, and NOTIFY the row's event."""
    payer, payee = await _funded_pair(api)
    notified: list[dict[str, object]] = []
    listener = await asyncpg.connect(database_url)
    await listener.add_listener(NOTIFY_CHANNEL, lambda *args: notified.append(orjson.loads(args[3])))
    try:
        created = (await api.client.post("/intents", _p2p(payer, payee, 1_000))).json()
        # Another (non-admin) service's intent is unknown to the caller, and stays created.
        theirs_payer = await api.admin.open_account()
        theirs = (await api.admin.post("/intents", _p2p(theirs_payer, payee, 1))).json()
        hidden = await api.client.post(f"/intents/{theirs['id']}/confirm")
        assert hidden.status_code == 404, hidden.text
        assert hidden.json()["error"]["code"] == "not_found"
        assert (await api.admin.get(f"/intents/{theirs['id']}")).json()["status"] == "created"
        unknown = await api.client.post(f"/intents/{uuid.uuid4()}/confirm")
        assert unknown.status_code == 404, unknown.text
        # An admin confirms any service's intent.
        confirmed = await api.admin.post(f"/intents/{created['id']}/confirm")
        assert confirmed.status_code == 200, confirmed.text
        assert confirmed.json()["status"] == "confirmed"
        assert confirmed.json()["version"] == created["version"] + 1
        again = await api.client.post(f"/intents/{created['id']}/confirm")
        assert again.status_code == 409, again.text
        assert again.json()["error"]["code"] == "invalid_transition"
        assert again.json()["error"]["details"]["from"] == "confirmed"
        row = await api.payments.pool.fetchrow("SELECT * FROM intent WHERE id = $1::uuid", created["id"])
        # The channel is the database's: other tests' confirms (other schemas) arrive on it too.
        for _ in range(50):
            if any(n["intent_id"] == created["id"] and n["status"] == "confirmed" for n in notified):
                break
            await asyncio.sleep(0.05)
        assert [n for n in notified if n["intent_id"] == created["id"] and n["status"] == "confirmed"] == [
            event_payload(Intent.from_row(row))
        ]
    finally:
        await listener.close()


async def test_a_confirm_wakes_the_settlement_queue_after_its_commit(api: Api, database_url: str) -> None:
    """The confirm's enqueue sends no NOTIFY inside its transaction (db/notices.py); the outbox
    workers are woken all the same, by the api's post-commit notice."""
    payer, payee = await _funded_pair(api)
    woken: list[str] = []
    listener = await asyncpg.connect(database_url)
    await listener.add_listener(JOB_AVAILABLE_CHANNEL, lambda *args: woken.append(args[3]))
    try:
        created = (await api.client.post("/intents", _p2p(payer, payee, 1_000))).json()
        confirmed = await api.client.post(f"/intents/{created['id']}/confirm")
        assert confirmed.status_code == 200, confirmed.text

        async def outbox_woken() -> bool:
            return "outbox" in woken

        await wait_until(outbox_woken)
    finally:
        await listener.close()


@pytest.mark.postgres_ledger_only(CONFLICTS)
async def test_confirm_runs_again_whole_after_a_ledger_conflict(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hold takes no savepoint of its own in the API: a transient ledger conflict aborts the POST's
    transaction, which runs again whole, holding the funds once."""
    payer, payee = await _funded_pair(api)
    created = (await api.client.post("/intents", _p2p(payer, payee, 1_000))).json()
    ledger = api.payments.ledger
    real = ledger.create_transfers
    calls: list[bool] = []

    async def conflict_once(transfers: list[Transfer], *, conn: Any = None, savepoint: bool = True) -> Any:
        calls.append(savepoint)
        results = await real(transfers, conn=conn, savepoint=savepoint)
        if len(calls) == 1:
            raise LedgerConflictError("a conflict after the batch ran: the rollback must undo it")
        return results

    monkeypatch.setattr(ledger, "create_transfers", conflict_once)
    confirmed = await api.client.post(f"/intents/{created['id']}/confirm")
    assert confirmed.status_code == 200, confirmed.text
    assert confirmed.json()["status"] == "confirmed"
    assert calls == [False, False]
    held = await api.client.balance(payer)
    assert held["available"] == 10_000 - 1_000 - created["fee"]


@pytest.mark.postgres_ledger_only(CONFLICTS)
async def test_a_refusal_after_ledger_conflicts_is_still_answered_as_a_refusal(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Conflicts and a refusal each run the POST again, on budgets of their own: a refused hold after
    the last conflict retry is a stored 422, not a server error."""
    payer, payee = await _funded_pair(api, amount=100)
    created = (await api.client.post("/intents", _p2p(payer, payee, 1_000))).json()
    ledger = api.payments.ledger
    real = ledger.create_transfers
    calls: list[bool] = []

    async def conflicts_first(transfers: list[Transfer], *, conn: Any = None, savepoint: bool = True) -> Any:
        calls.append(savepoint)
        if len(calls) <= LEDGER_CONFLICT_RETRIES_MAX:
            raise LedgerConflictError("a transient conflict")
        return await real(transfers, conn=conn, savepoint=savepoint)

    monkeypatch.setattr(ledger, "create_transfers", conflicts_first)
    refused = await api.client.post(f"/intents/{created['id']}/confirm")
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["code"] == "insufficient_funds"
    # The conflicts, the refusal, the refusal answered in its savepoint.
    assert len(calls) == LEDGER_CONFLICT_RETRIES_MAX + 2
    intent = (await api.client.get(f"/intents/{created['id']}")).json()
    assert intent["status"] == "created"


async def test_conflicts_on_every_attempt_answer_503_and_change_nothing(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past its retry budget a confirm is busy, not broken: a 503 in the error shape, with Retry-After,
    nothing held, and the same request with the same key then succeeds."""
    payer, payee = await _funded_pair(api)
    created = (await api.client.post("/intents", _p2p(payer, payee, 1_000))).json()
    ledger = api.payments.ledger
    real = ledger.create_transfers
    calls: list[bool] = []

    async def always_conflicts(transfers: list[Transfer], *, conn: Any = None, savepoint: bool = True) -> Any:
        calls.append(savepoint)
        raise LedgerConflictError("a transient conflict")

    monkeypatch.setattr(ledger, "create_transfers", always_conflicts)
    busy = await api.client.post(f"/intents/{created['id']}/confirm", key="confirm-busy")
    assert busy.status_code == 503, busy.text
    assert busy.headers["Retry-After"] == "1"
    assert busy.json()["error"]["code"] == "ledger_busy"
    assert len(calls) == LEDGER_CONFLICT_RETRIES_MAX + 1
    assert (await api.client.get(f"/intents/{created['id']}")).json()["status"] == "created"
    assert (await api.client.balance(payer))["available"] == 10_000

    monkeypatch.setattr(ledger, "create_transfers", real)
    again = await api.client.post(f"/intents/{created['id']}/confirm", key="confirm-busy")
    assert again.status_code == 200, again.text
    assert "Idempotent-Replayed" not in again.headers
