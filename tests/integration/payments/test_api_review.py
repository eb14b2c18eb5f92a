"""The HTTP API and the settlement path where a review found them broken (each test failed before its
fix, 2026-11-29): opposite payments under a volume policy deadlocked into a 500, an invoice could
debit another service's user, a POST signature refused for its Idempotency-Key could be replayed,
and an account's history showed another service's intent metadata."""

from __future__ import annotations

import asyncio

import httpx
import orjson

from tests.integration.payments.conftest import Api
from tests.integration.payments.test_intents import _funded_pair, _p2p, _settle
from tests.support.signed_client import SignedClient


async def test_opposite_payments_under_a_daily_volume_policy_do_not_deadlock_into_500(api: Api) -> None:
    # A pays B while B pays A. With a daily-volume policy each create locks its payer's account row
    # FOR UPDATE (the volume check), then inserts an intent whose foreign key takes FOR KEY SHARE on
    # the payee's row, which the other transaction holds FOR UPDATE: a deadlock, answered as a 500.
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


async def test_a_merchant_invoice_cannot_debit_another_services_user_account(api: Api) -> None:
    # Every other channel requires the payer to be the caller's own account; merchant-invoice checks
    # only that the payee (the merchant) is, and the same caller confirms. So a service can invoice
    # any user account of any other service and confirm the invoice itself: a pull of their money.
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


async def test_a_post_signature_refused_for_its_idempotency_key_cannot_be_replayed(api: Api) -> None:
    # The signature of a POST is remembered only once the request reaches run_idempotent's
    # transaction; a POST refused earlier (no Idempotency-Key, or an invalid one) leaves it unused.
    # The key is not covered by the signature, so whoever saw that request can send it again with a
    # key of their choosing and it executes: a replayed signature accepted.
    body = orjson.dumps({"kind": "user", "currency": "THB"})
    headers = api.client.headers_for("POST", "/accounts", body) | {"Content-Type": "application/json"}
    first = await api.http.post("/accounts", content=body, headers=headers)
    assert first.status_code == 400, first.text
    replay = await api.http.post("/accounts", content=body, headers=headers | {"Idempotency-Key": "attacker"})
    assert replay.status_code == 401, replay.text
    assert replay.json()["error"]["code"] == "replayed"


async def test_account_history_does_not_show_another_services_intent(api: Api) -> None:
    # GET /intents/{id} answers another service's intent as unknown "so its existence does not
    # leak"; the history of an account that intent pays into shows it whole (metadata, description,
    # the other service's payer account).
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
