"""Payouts through the sandbox PSPs over real HTTP (IPPS unless a test names QP or Wise): every
transition of psp_tx, and each fault the sandbox plays, end where they must, settle the intent once,
and never send an IPPS transfer twice (QP and Wise only ever again under the same key)."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import pytest

from paymanager.application import ledger_ops
from paymanager.application.psp.payout import WriteAheads
from paymanager.domain.channels import SystemAccount
from tests.integration.psp.conftest import PayoutApi, StartPayoutApi
from tests.support.signed_client import SignedClient
from tests.support.waiting import wait_for_lock_waiters


async def test_a_payout_completes_posts_its_hold_and_was_sent_once(payouts: PayoutApi) -> None:
    payer = await payouts.funded_account(100_000)
    intent_id = await payouts.payout(payer, 5_000)
    settled = await payouts.wait_status(intent_id, {"settled", "failed"})
    assert settled["status"] == "settled"
    assert settled["psp"]["state"] == "COMPLETED"
    assert settled["psp"]["reference"].startswith("ipps-")
    tx = await payouts.tx(intent_id)
    assert payouts.sandbox.submissions() == {str(tx["id"]): 1}
    assert tx["query_ref"] == f"q-{tx['id']}"
    balance = await payouts.client.balance(payer)
    assert balance["posted"] == 100_000 - 5_000 - settled["fee"]
    assert balance["available"] == balance["posted"]
    async with payouts.payments.pool.acquire() as conn:
        settlement = await conn.fetchrow("SELECT * FROM settlement WHERE intent_id = $1", tx["intent_id"])
    assert settlement["outcome"] == "posted"


EVERY_PSP = ("ipps", "qp", "wise")
NOSTRO = {"ipps": SystemAccount.NOSTRO_IPPS, "qp": SystemAccount.NOSTRO_QP, "wise": SystemAccount.NOSTRO_WISE}


@pytest.fixture
async def every_psp(start_payout_api: StartPayoutApi) -> PayoutApi:
    return await start_payout_api(psp_names=",".join(EVERY_PSP))


async def _nostro_posted(api: PayoutApi, psp: str) -> int:
    account = api.payments.system_account(NOSTRO[psp], "THB")
    posted: int = (await ledger_ops.balance(api.payments.ledger, account))["posted"]
    return posted


@pytest.mark.parametrize("psp", EVERY_PSP)
async def test_a_payout_through_each_psp_completes_on_its_queue_and_credits_its_nostro(
    every_psp: PayoutApi, psp: str
) -> None:
    payer = await every_psp.funded_account(100_000)
    before = {name: await _nostro_posted(every_psp, name) for name in EVERY_PSP}
    intent_id = await every_psp.payout(payer, 5_000, channel=f"{psp}-transfer")
    settled = await every_psp.wait_status(intent_id, {"settled", "failed"})
    assert settled["status"] == "settled"
    assert (settled["psp"]["psp"], settled["psp"]["state"]) == (psp, "COMPLETED")
    assert settled["psp"]["reference"].startswith(f"{psp}-")
    tx = await every_psp.tx(intent_id)
    sent_as = str(tx["idempotency_key"] if psp == "wise" else tx["id"])
    assert every_psp.sandbox.submissions() == {sent_as: 1}
    after = {name: await _nostro_posted(every_psp, name) for name in EVERY_PSP}
    assert {name: after[name] - before[name] for name in EVERY_PSP} == {
        name: 5_000 if name == psp else 0 for name in EVERY_PSP
    }
    balance = await every_psp.client.balance(payer)
    assert balance["available"] == balance["posted"] == 100_000 - 5_000 - settled["fee"]
    async with every_psp.payments.pool.acquire() as conn:
        queue = await conn.fetchval("SELECT queue FROM job WHERE unique_key = $1", f"psp.payout:{tx['id']}")
    assert queue == f"psp.{psp}"
    refund = await every_psp.client.post(f"/intents/{intent_id}/refunds", {"amount": 1_000})
    assert refund.status_code == 409, refund.text
    assert refund.json()["error"]["code"] == "refund_not_supported"


async def test_wise_sends_the_same_idempotency_key_again_after_an_accepted_transfer_timed_out(
    every_psp: PayoutApi,
) -> None:
    # The transfer is recorded and its answer hangs past the driver's timeout; the next try's
    # inquiry does not see it yet, so Wise (deduplicating by customerTransactionId) is sent it again.
    payer = await every_psp.funded_account(100_000)
    every_psp.sandbox.faults(accept_then_timeout_rate=1, hang_ms=3_000, unseen_inquiries=1)
    intent_id = await every_psp.payout(payer, 5_000, channel="wise-transfer")
    settled = await every_psp.wait_status(intent_id, {"settled", "failed"})
    assert settled["status"] == "settled"
    tx = await every_psp.tx(intent_id)
    assert every_psp.sandbox.submissions() == {str(tx["idempotency_key"]): 2}
    transfers = every_psp.sandbox.transfers()
    assert list(transfers) == [f"wise:{tx['idempotency_key']}"]
    assert "no answer" in tx["last_error"]
    async with every_psp.payments.pool.acquire() as conn:
        settlements = await conn.fetchval(
            "SELECT count(*) FROM settlement WHERE intent_id = $1", tx["intent_id"]
        )
    assert settlements == 1


async def test_ipps_is_not_sent_again_when_its_inquiry_lags_after_a_timeout(payouts: PayoutApi) -> None:
    payer = await payouts.funded_account(100_000)
    payouts.sandbox.faults(accept_then_timeout_rate=1, hang_ms=3_000, unseen_inquiries=1)
    intent_id = await payouts.payout(payer, 5_000)
    settled = await payouts.wait_status(intent_id, {"settled", "failed"})
    assert settled["status"] == "settled"
    tx = await payouts.tx(intent_id)
    assert payouts.sandbox.submissions() == {str(tx["id"]): 1}


@pytest.mark.parametrize("channel", ["qp-transfer", "wise-transfer"])
async def test_a_payout_on_a_psp_not_in_psp_names_is_refused_and_nothing_is_held(
    payouts: PayoutApi, channel: str
) -> None:
    payer = await payouts.funded_account(100_000)
    created = await payouts.client.post(
        "/intents", {"channel": channel, "amount": 5_000, "currency": "THB", "payer_account_id": payer}
    )
    assert created.status_code == 422, created.text
    error = created.json()["error"]
    assert error["code"] == "psp_not_configured"
    assert error["details"]["psp"] == channel.removesuffix("-transfer")
    async with payouts.payments.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM intent WHERE channel = $1", channel) == 0


async def test_a_payout_created_while_its_psp_was_served_is_refused_at_confirm_once_it_is_not(
    start_payout_api: StartPayoutApi,
) -> None:
    served = await start_payout_api(psp_names="ipps,qp")
    payer = await served.funded_account(100_000)
    created = await served.client.post(
        "/intents", {"channel": "qp-transfer", "amount": 5_000, "currency": "THB", "payer_account_id": payer}
    )
    assert created.status_code == 201, created.text
    unserved = await start_payout_api()  # PSP_NAMES=ipps
    same_caller = SignedClient(unserved.http, served.client.service_id, served.client.secret)
    confirmed = await same_caller.post(f"/intents/{created.json()['id']}/confirm")
    assert confirmed.status_code == 422, confirmed.text
    assert confirmed.json()["error"]["code"] == "psp_not_configured"
    assert (await served.intent(created.json()["id"]))["status"] == "created"
    balance = await served.client.balance(payer)
    assert balance["available"] == balance["posted"] == 100_000
    async with served.payments.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM psp_tx") == 0


async def test_a_rejected_transfer_fails_the_intent_and_voids_its_hold(payouts: PayoutApi) -> None:
    payer = await payouts.funded_account(100_000)
    payouts.sandbox.faults(failure_rate=1)
    intent_id = await payouts.payout(payer, 5_000)
    failed = await payouts.wait_status(intent_id, {"settled", "failed"})
    assert failed["status"] == "failed"
    assert failed["psp"]["state"] == "FAILED"
    assert "did not pay out" in failed["failure_reason"]
    balance = await payouts.client.balance(payer)
    assert balance["available"] == balance["posted"] == 100_000


async def test_a_refused_beneficiary_fails_before_any_transfer(payouts: PayoutApi) -> None:
    payer = await payouts.funded_account(100_000)
    payouts.sandbox.faults(account_invalid_rate=1)
    intent_id = await payouts.payout(payer, 5_000)
    failed = await payouts.wait_status(intent_id, {"settled", "failed"})
    assert failed["psp"]["state"] == "FAILED"
    assert "beneficiary refused" in failed["psp"]["last_error"]
    assert payouts.sandbox.submissions() == {}


async def test_in_progress_is_polled_until_the_psp_completes(payouts: PayoutApi) -> None:
    payer = await payouts.funded_account(100_000)
    payouts.sandbox.faults(in_progress_polls=3)
    intent_id = await payouts.payout(payer, 5_000)
    settled = await payouts.wait_status(intent_id, {"settled", "failed"})
    assert settled["status"] == "settled"
    tx = await payouts.tx(intent_id)
    assert payouts.sandbox.submissions() == {str(tx["id"]): 1}
    assert tx["confirm_ref"] is not None


async def test_accepted_then_timed_out_is_inquired_not_sent_again(payouts: PayoutApi) -> None:
    payer = await payouts.funded_account(100_000)
    payouts.sandbox.faults(accept_then_timeout_rate=1, hang_ms=5_000)
    intent_id = await payouts.payout(payer, 5_000)
    settled = await payouts.wait_status(intent_id, {"settled", "failed"})
    assert settled["status"] == "settled"
    tx = await payouts.tx(intent_id)
    assert payouts.sandbox.submissions() == {str(tx["id"]): 1}
    assert tx["attempts"] >= 1
    assert "no answer" in tx["last_error"]


async def test_a_psp_that_keeps_failing_ends_in_manual_review_with_the_hold_kept(payouts: PayoutApi) -> None:
    payer = await payouts.funded_account(100_000)
    intent_id = await payouts.payout(payer, 5_000)
    await payouts.wait_psp_state(intent_id, {"COMPLETED"})
    payouts.sandbox.faults(error_rate=1)
    second = await payouts.payout(payer, 5_000)
    review = await payouts.wait_psp_state(second, {"MANUAL_REVIEW"})
    assert review["status"] == "confirmed"
    tx = await payouts.tx(second)
    assert tx["attempts"] == 4  # PSP_MAX_RETRIES (3) + 1
    assert "HTTP 503" in tx["last_error"]
    assert str(tx["id"]) not in payouts.sandbox.submissions()


async def test_an_unknown_psp_status_goes_to_manual_review(payouts: PayoutApi) -> None:
    payer = await payouts.funded_account(100_000)
    payouts.sandbox.faults(manual_review_rate=1)
    intent_id = await payouts.payout(payer, 5_000)
    review = await payouts.wait_psp_state(intent_id, {"MANUAL_REVIEW"})
    assert review["status"] == "confirmed"
    assert "does not know" in review["psp"]["last_error"]


async def test_a_429_makes_the_payout_wait_not_fail(payouts: PayoutApi) -> None:
    payer = await payouts.funded_account(100_000)
    payouts.sandbox.faults(rate_limited_requests=2, retry_after_s=0.2)
    intent_id = await payouts.payout(payer, 5_000)
    settled = await payouts.wait_status(intent_id, {"settled", "failed"})
    assert settled["status"] == "settled"
    tx = await payouts.tx(intent_id)
    assert tx["attempts"] == 0  # a 429 is no failed try
    assert payouts.sandbox.submissions() == {str(tx["id"]): 1}


async def test_latency_is_waited_on_and_the_payout_completes(payouts: PayoutApi) -> None:
    payer = await payouts.funded_account(100_000)
    payouts.sandbox.faults(latency_ms=50, latency_jitter_ms=50)
    ids = [await payouts.payout(payer, 1_000) for _ in range(5)]
    for intent_id in ids:
        assert (await payouts.wait_status(intent_id, {"settled", "failed"}))["status"] == "settled"
    assert sorted(payouts.sandbox.submissions().values()) == [1] * 5


async def test_payouts_ending_together_each_settle_or_fail_once(payouts: PayoutApi) -> None:
    # Confirmed while the PSP answers slowly, so their ends reach the worker together and share
    # transactions; about half the transfers are rejected, so a group mixes posts and voids.
    payer = await payouts.funded_account(1_000_000)
    payouts.sandbox.faults(latency_ms=100, failure_rate=0.5)
    intent_ids = [await payouts.payout(payer, 1_000 + n) for n in range(16)]
    ended = [await payouts.wait_status(intent_id, {"settled", "failed"}) for intent_id in intent_ids]
    submissions = payouts.sandbox.submissions()
    async with payouts.payments.pool.acquire() as conn:
        settlements = {
            str(row["intent_id"]): row["outcome"]
            for row in await conn.fetch("SELECT intent_id, outcome FROM settlement WHERE intent_id = ANY($1)",
                                        [uuid.UUID(i) for i in intent_ids])
        }  # fmt: skip
    for intent in ended:
        tx = await payouts.tx(str(intent["id"]))
        assert submissions[str(tx["id"])] == 1
        if intent["status"] == "settled":
            assert intent["psp"]["state"] == "COMPLETED"
            assert settlements[str(intent["id"])] == "posted"
        else:
            assert intent["psp"]["state"] == "FAILED"
            assert settlements[str(intent["id"])] == "voided"
    posted = sum(i["amount"] + i["fee"] for i in ended if i["status"] == "settled")
    balance = await payouts.client.balance(payer)
    assert balance["available"] == balance["posted"] == 1_000_000 - posted


async def test_a_payout_read_while_it_settles_shows_its_intent_and_transfer_from_one_moment(
    start_payout_api: StartPayoutApi, pool: asyncpg.Pool
) -> None:
    api = await start_payout_api(worker_roles="api,outbox-worker")  # no psp-worker: it waits as NEW
    payer = await api.funded_account(100_000)
    intent_id = await api.payout(payer, 5_000)
    peer = await pool.acquire()
    try:
        settling = peer.transaction()
        await settling.start()
        # What end_payout commits in one transaction (here past the triggers: the test decides the
        # order), with psp_tx locked first so that a reader of it waits until the commit.
        await peer.execute("SET LOCAL session_replication_role = replica")
        await peer.execute("LOCK TABLE psp_tx IN ACCESS EXCLUSIVE MODE")
        await peer.execute(
            "UPDATE psp_tx SET state = 'COMPLETED', finished_at = now() WHERE intent_id = $1",
            uuid.UUID(intent_id),
        )
        await peer.execute(
            "UPDATE intent SET status = 'settled', finished_at = now() WHERE id = $1", uuid.UUID(intent_id)
        )
        read = asyncio.ensure_future(api.intent(intent_id))
        await wait_for_lock_waiters(pool)  # the read has the intent and waits for its transfer
        await settling.commit()
        view = await read
    finally:
        await pool.release(peer)
    assert (view["status"], view["psp"]["state"]) in {("confirmed", "NEW"), ("settled", "COMPLETED")}


# What a payout job finds after a crash at each point of the write-ahead, written as that crash left it.
LEFT_BY_A_CRASH = {
    # The folded load committed QUERY_PENDING, then the worker died before the check's answer.
    "QUERY_PENDING": ["UPDATE psp_tx SET state = 'QUERY_PENDING', version = version + 1 WHERE id = $1"],
    # An older release committed QUERIED and CONFIRM_PENDING apart, and died between them.
    "QUERIED": [
        "UPDATE psp_tx SET state = 'QUERY_PENDING', version = version + 1 WHERE id = $1",
        "UPDATE psp_tx SET state = 'QUERIED', version = version + 1, query_ref = 'q-' || id WHERE id = $1",
    ],
}


@pytest.mark.parametrize("found", sorted(LEFT_BY_A_CRASH))
async def test_a_payout_found_part_way_goes_on_from_there_and_sends_once(
    start_payout_api: StartPayoutApi, found: str
) -> None:
    waiting = await start_payout_api(worker_roles="api,outbox-worker")  # no psp-worker: it stays NEW
    payer = await waiting.funded_account(100_000)
    intent_id = await waiting.payout(payer, 5_000)
    tx = await waiting.tx(intent_id)
    async with waiting.payments.pool.acquire() as conn:
        for statement in LEFT_BY_A_CRASH[found]:
            await conn.execute(statement, tx["id"])
    working = await start_payout_api()
    settled = await working.wait_status(intent_id, {"settled", "failed"})
    assert (settled["status"], settled["psp"]["state"]) == ("settled", "COMPLETED")
    assert working.sandbox.submissions() == {str(tx["id"]): 1}


async def test_payouts_started_together_commit_each_state_in_one_transaction_and_leave_a_moved_one_alone(
    start_payout_api: StartPayoutApi,
) -> None:
    # No psp-worker: the jobs wait, and the test drives the write-ahead steps itself.
    api = await start_payout_api(worker_roles="api,outbox-worker")
    payer = await api.funded_account(100_000)
    tx_ids = [uuid.UUID(str((await api.tx(await api.payout(payer, 5_000 + n)))["id"])) for n in range(4)]
    steps = WriteAheads(api.payments.pool, batch_max=100, batches_in_flight_max=1)
    missing = uuid.uuid4()

    started = await asyncio.gather(*(steps.start(tx_id) for tx_id in [*tx_ids, missing]))
    assert started[-1] is None
    moved = [tx for tx in started if tx is not None]
    assert [(tx.id, tx.state.value, tx.version) for tx in moved] == [(i, "QUERY_PENDING", 2) for i in tx_ids]
    # One group: one transaction (now() is its start), so one commit for the four.
    assert len({tx.updated_at for tx in moved}) == 1
    assert await steps.start(tx_ids[0]) == moved[0]  # not NEW any more: read as it is

    # The same view given twice in one group moves once: the second caller's view is stale.
    first, stale, *others = await asyncio.gather(
        steps.query_accepted(moved[0], "q-0"), steps.query_accepted(moved[0], "q-stale"),
        *(steps.query_accepted(tx, f"q-{n}") for n, tx in enumerate(moved[1:], start=1)),
    )  # fmt: skip
    assert stale is None
    confirming = [first, *others]
    assert all(tx is not None for tx in confirming)
    assert [(tx.id, tx.state.value, tx.version, tx.query_ref) for tx in confirming if tx is not None] == [
        (tx_id, "CONFIRM_PENDING", 4, f"q-{n}") for n, tx_id in enumerate(tx_ids)
    ]
    assert await steps.query_accepted(moved[1], "q-again") is None  # a stale view moves nothing
    async with api.payments.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT state, version, query_ref FROM psp_tx WHERE id = ANY($1) ORDER BY id", tx_ids
        )
    assert [dict(row) for row in rows] == [
        {"state": "CONFIRM_PENDING", "version": 4, "query_ref": f"q-{n}"}
        for n, _ in sorted(enumerate(tx_ids), key=lambda pair: pair[1])
    ]
