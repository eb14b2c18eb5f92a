"""A split-tender session from confirm to its end: completion with the ledger's record, a declined leg
and its compensation (once), and provider faults that a retry with the same key survives."""

from __future__ import annotations

import uuid

from paymanager.application.sessions.ports import leg_key
from paymanager.domain.channels import FEE_SHARDS
from paymanager.domain.sessions import session_fee
from tests.integration.sessions.conftest import Env


async def _merchant_posted(env: Env) -> int:
    response = await env.shop.get(f"/accounts/{env.merchant}/balance")
    assert response.status_code == 200, response.text
    return int(response.json()["posted"])


async def _fee_posted(env: Env, session_id: str) -> int:
    from paymanager.ledger import account_id_for

    shard = uuid.UUID(session_id).int % FEE_SHARDS
    balance = await env.components.ledger.balance(account_id_for(f"system.fees.THB.{shard}"))
    return balance.posted


async def test_gift_and_card_session_completes_and_the_ledger_pays_the_merchant(env: Env) -> None:
    await env.giftcards.cards(("GC-1001", 5_000))
    session = await env.create([("gift_card", "GC-1001", 3_000), ("card", "tok_visa_4242", 7_000)])
    assert session["status"] == "open"
    assert session["fee"] == session_fee(10_000)

    confirmed = await env.confirm(session["id"])
    assert confirmed.status_code == 200, confirmed.text
    assert confirmed.json()["status"] == "processing"

    done = await env.wait_status(session["id"], "completed")
    await env.wait_leg(session["id"], 1, "captured")
    await env.wait_actions_done()
    assert done["legs"][0]["status"] == "captured"
    assert await env.giftcards.balance("GC-1001") == 2_000
    card_leg = uuid.UUID(done["legs"][1]["id"])
    authorization = await env.cards.authorization(leg_key(card_leg, "authorize"))
    assert authorization["status"] == "captured"
    assert authorization["amount"] == 7_000
    assert await _merchant_posted(env) == 10_000 - session["fee"]
    assert await _fee_posted(env, session["id"]) == session["fee"]
    assert await env.events(session["id"]) == ["session.completed"]
    counters = await env.giftcards.counters()
    assert counters["GC-1001"]["debits_applied"] == 1
    assert counters["GC-1001"].get("cancels_applied", 0) == 0


async def test_card_declined_after_the_gift_debit_cancels_the_debit_once(env: Env) -> None:
    await env.giftcards.cards(("GC-2001", 5_000))
    await env.cards.faults(decline_cards=["tok_declined"])
    session = await env.create([("gift_card", "GC-2001", 4_000), ("card", "tok_declined", 1_000)])
    # The gift leg is captured first: the card's authorisation waits until then.
    await env.cards.faults(fail_cards=["tok_declined"])
    assert (await env.confirm(session["id"])).status_code == 200
    await env.wait_leg(session["id"], 0, "captured")
    assert await env.giftcards.balance("GC-2001") == 1_000
    # The failed authorisation must be waiting for its retry before the retry is asked for: under
    # load the leg's status can be read before its job's first attempt has ended.
    await env.wait_job("AUTHORIZE_PSP", "retryable")
    await env.cards.faults(fail_cards=[])
    assert await env.retry_now("AUTHORIZE_PSP") == 1

    failed = await env.wait_status(session["id"], "failed")
    assert failed["legs"][1]["status"] == "failed"
    await env.wait_leg(session["id"], 0, "cancelled")
    await env.wait_actions_done()
    assert await env.giftcards.balance("GC-2001") == 5_000
    counters = (await env.giftcards.counters())["GC-2001"]
    assert counters["debits_applied"] == 1
    assert counters["cancels_applied"] == 1
    assert len(await env.jobs("CANCEL_GIFT")) == 1
    assert await env.events(session["id"]) == ["session.failed"]
    assert await _merchant_posted(env) == 0


async def test_gift_card_without_balance_fails_the_session_and_releases_the_card(env: Env) -> None:
    await env.giftcards.cards(("GC-3001", 100))
    session = await env.create([("gift_card", "GC-3001", 500), ("card", "tok_ok", 500)])
    await env.giftcards.faults(fail_cards=["GC-3001"])
    assert (await env.confirm(session["id"])).status_code == 200
    await env.wait_leg(session["id"], 1, "authorized")
    # The card leg can be authorised before the gift debit's first attempt has failed: a retry
    # asked for then finds nothing to retry, and the debit's next attempt is a minute away.
    await env.wait_job("DEBIT_GIFT", "retryable")
    await env.giftcards.faults(fail_cards=[])
    assert await env.retry_now("DEBIT_GIFT") == 1

    failed = await env.wait_status(session["id"], "failed")
    assert failed["legs"][0]["status"] == "failed"
    await env.wait_leg(session["id"], 1, "released")
    await env.wait_actions_done()
    card_leg = uuid.UUID(failed["legs"][1]["id"])
    assert (await env.cards.authorization(leg_key(card_leg, "authorize")))["status"] == "released"
    assert await env.giftcards.balance("GC-3001") == 100
    assert len(await env.jobs("RELEASE_HOLD")) == 1


async def test_a_5xx_before_acceptance_is_retried_with_the_same_key(env: Env) -> None:
    await env.giftcards.cards(("GC-4001", 1_000))
    await env.giftcards.faults(fail_next=1)
    session = await env.create([("gift_card", "GC-4001", 1_000)])
    assert (await env.confirm(session["id"])).status_code == 200
    await env.wait_job("DEBIT_GIFT", "retryable")
    [job] = await env.jobs("DEBIT_GIFT")
    assert "ProviderUnavailableError" in str(job["errors"])
    assert await env.retry_now("DEBIT_GIFT") == 1

    await env.wait_status(session["id"], "completed")
    counters = (await env.giftcards.counters())["GC-4001"]
    assert counters["debit_submissions"] == 2
    assert counters["debits_applied"] == 1
    assert await env.giftcards.balance("GC-4001") == 0


async def test_a_debit_accepted_then_timed_out_is_not_debited_twice(env: Env) -> None:
    await env.giftcards.cards(("GC-5001", 1_000))
    await env.giftcards.faults(accept_then_timeout_next=1, hang_ms=3_000)
    session = await env.create([("gift_card", "GC-5001", 600)])
    assert (await env.confirm(session["id"])).status_code == 200
    # The provider debited the card, but its answer never came within the driver's timeout.
    await env.wait_job("DEBIT_GIFT", "retryable")
    assert await env.giftcards.balance("GC-5001") == 400
    assert (await env.get(session["id"]))["legs"][0]["status"] == "pending"
    await env.retry_now("DEBIT_GIFT")

    await env.wait_status(session["id"], "completed")
    counters = (await env.giftcards.counters())["GC-5001"]
    assert counters["debit_submissions"] == 2
    assert counters["debits_applied"] == 1
    assert await env.giftcards.balance("GC-5001") == 400


async def test_cancel_of_an_open_session_calls_no_provider(env: Env) -> None:
    await env.giftcards.cards(("GC-6001", 1_000))
    session = await env.create([("gift_card", "GC-6001", 300), ("card", "tok_c", 200)])
    cancelled = await env.shop.post(f"/checkout-sessions/{session['id']}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    body = cancelled.json()
    assert body["status"] == "cancelled"
    assert [leg["status"] for leg in body["legs"]] == ["cancelled", "released"]
    assert await env.events(session["id"]) == ["session.cancelled"]
    assert await env.giftcards.counters() == {}
    assert await env.cards.counters() == {}
    assert (await env.confirm(session["id"])).status_code == 409
