"""Settlement of a group of intents in one shared transaction (settle_many through jobs/batch.py):
each job is fenced by its own lease, and each intent meets its own outcome."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import asyncpg
import orjson
import pytest
import redis.asyncio as aioredis

from paymanager.adapters.redis_events import RedisPublisher
from paymanager.application.intents.cancel import cancel_intent
from paymanager.application.intents.confirm import OUTBOX_QUEUE, SETTLE_KIND
from paymanager.application.intents.events import NOTIFY_CHANNEL, event_payload, topic
from paymanager.application.intents.settle import settle, settle_handler
from paymanager.application.intents.store import Intent
from paymanager.application.ledger_ops import LedgerRefusedError
from paymanager.application.services.use_cases import load_service
from paymanager.jobs import JobContext, LeaseLostError, PermanentError, enqueue
from tests.integration.payments.conftest import Api
from tests.support.job_contexts import context_from_row
from tests.support.ledger_holds import expire_holds_in_one_second, wait_until_released
from tests.support.locks import wait_for_a_waiter_behind

pytestmark = pytest.mark.both_ledgers

AMOUNT = 1_000
FUNDING = 10_000


async def _confirmed(
    api: Api, count: int, *, funded: Callable[[], None] = lambda: None
) -> list[tuple[str, str]]:
    """`count` confirmed p2p intents, each with its own payee: (intent id, payee id). `funded` runs
    once the payer is funded, before the confirms."""
    payer = await api.client.open_account()
    funding = await api.admin.fund(payer, FUNDING * count)
    async with api.payments.pool.acquire() as conn, conn.transaction():
        await settle(api.payments, conn, uuid.UUID(funding["id"]), settled_by="test")
    funded()
    out = []
    for _ in range(count):
        payee = await api.client.open_account()
        body = {"channel": "internal-p2p", "amount": AMOUNT, "currency": "THB",
                "payer_account_id": payer, "payee_account_id": payee}  # fmt: skip
        created = await api.client.post("/intents", body)
        confirmed = await api.client.post(f"/intents/{created.json()['id']}/confirm")
        assert confirmed.json()["status"] == "confirmed", confirmed.text
        out.append((created.json()["id"], payee))
    return out


def _context(pool: asyncpg.Pool, row: Any) -> JobContext:
    return context_from_row(pool, row, max_attempts=10)


async def _claim(pool: asyncpg.Pool, intent_ids: list[str], owner: str = "first") -> list[JobContext]:
    """Claim the settlement jobs of `intent_ids` as a worker would (state running, a fresh lease)."""
    rows = await pool.fetch(
        "UPDATE job SET state = 'running', attempt = attempt + 1, lease_owner = $3,"
        " lease_token = gen_random_uuid(), lease_expires_at = now() + interval '1 minute'"
        " WHERE kind = $1 AND payload->>'intent_id' = ANY($2::text[]) RETURNING *",
        SETTLE_KIND, intent_ids, owner,
    )  # fmt: skip
    by_intent = {row["payload"]["intent_id"]: row for row in rows}
    return [_context(pool, by_intent[i]) for i in intent_ids]


async def _take_lease(pool: asyncpg.Pool, ctx: JobContext) -> JobContext:
    """What a rescue and a claim by another worker do to a stalled job: a new lease, a new token."""
    row = await pool.fetchrow(
        "UPDATE job SET lease_owner = 'second', lease_token = gen_random_uuid(),"
        " stalled_count = stalled_count + 1 WHERE id = $1 RETURNING *",
        ctx.id,
    )
    return _context(pool, row)


async def _settlements(pool: asyncpg.Pool, intent_id: str) -> list[str]:
    rows = await pool.fetch("SELECT outcome FROM settlement WHERE intent_id = $1", uuid.UUID(intent_id))
    return [r["outcome"] for r in rows]


async def _job_state(pool: asyncpg.Pool, ctx: JobContext) -> str:
    return str(await pool.fetchval("SELECT state::text FROM job WHERE id = $1", ctx.id))


async def test_a_group_settles_every_intent_and_completes_every_job(api: Api) -> None:
    intents = await _confirmed(api, 4)
    pool = api.payments.pool
    ctxs = await _claim(pool, [i for i, _ in intents])
    handle = settle_handler(api.payments, batch_max=10)
    await asyncio.gather(*(handle(ctx) for ctx in ctxs))
    for (intent_id, payee), ctx in zip(intents, ctxs, strict=True):
        assert (await api.client.get(f"/intents/{intent_id}")).json()["status"] == "settled"
        assert await _settlements(pool, intent_id) == ["posted"]
        assert (await api.client.balance(payee))["posted"] == AMOUNT
        assert ctx.completed_in_transaction
        assert await _job_state(pool, ctx) == "completed"


async def test_a_stale_claim_inside_a_group_does_not_settle_its_intent_and_the_others_settle(
    api: Api,
) -> None:
    intents = await _confirmed(api, 3)
    pool = api.payments.pool
    ctxs = await _claim(pool, [i for i, _ in intents])
    # The second job stalled: its lease was rescued and taken by another worker before the group ran.
    second_claim = await _take_lease(pool, ctxs[1])
    handle = settle_handler(api.payments, batch_max=10)
    outcomes = await asyncio.gather(*(handle(ctx) for ctx in ctxs), return_exceptions=True)
    assert isinstance(outcomes[1], LeaseLostError)
    assert ctxs[1].lease_lost.is_set()
    assert outcomes[0] is None
    assert outcomes[2] is None
    stale_intent, stale_payee = intents[1]
    assert (await api.client.get(f"/intents/{stale_intent}")).json()["status"] == "confirmed"
    assert await _settlements(pool, stale_intent) == []
    assert (await api.client.balance(stale_payee))["posted"] == 0
    for index in (0, 2):
        assert await _settlements(pool, intents[index][0]) == ["posted"]
        assert (await api.client.balance(intents[index][1]))["posted"] == AMOUNT
    # The claim that holds the lease settles it, once.
    await handle(second_claim)
    assert await _settlements(pool, stale_intent) == ["posted"]
    assert (await api.client.balance(stale_payee))["posted"] == AMOUNT
    assert await pool.fetchval("SELECT lease_owner FROM job WHERE id = $1", ctxs[1].id) is None
    assert await _job_state(pool, second_claim) == "completed"


async def test_a_ledger_refusal_fails_only_its_own_job_and_writes_nothing_for_it(api: Api) -> None:
    intents = await _confirmed(api, 3)
    pool = api.payments.pool
    refused_intent, refused_payee = intents[1]
    # A hold the ledger does not know: posting it is refused (pending_transfer_not_found).
    await pool.execute(
        "UPDATE intent SET hold_id = $2 WHERE id = $1", uuid.UUID(refused_intent), uuid.uuid4()
    )
    ctxs = await _claim(pool, [i for i, _ in intents])
    handle = settle_handler(api.payments, batch_max=10)
    outcomes = await asyncio.gather(*(handle(ctx) for ctx in ctxs), return_exceptions=True)
    assert isinstance(outcomes[1], LedgerRefusedError)
    assert outcomes[0] is None
    assert outcomes[2] is None
    assert (await api.client.get(f"/intents/{refused_intent}")).json()["status"] == "confirmed"
    assert await _settlements(pool, refused_intent) == []
    assert (await api.client.balance(refused_payee))["posted"] == 0
    assert not ctxs[1].completed_in_transaction
    assert await _job_state(pool, ctxs[1]) == "running"  # the worker records the failure and retries
    for index in (0, 2):
        assert await _settlements(pool, intents[index][0]) == ["posted"]
        assert await _job_state(pool, ctxs[index]) == "completed"


@pytest.mark.postgres_ledger_only("reads ledger_transfer_failed, the PostgreSQL ledger's table of burned ids")
async def test_a_refused_intent_writes_nothing_in_the_ledger_of_the_committed_group(api: Api) -> None:
    """settle_many's contract: a job whose outcome is an exception has NO effect in the transaction.
    The ledger burns the ids of a transiently refused chain (ledger_transfer_failed): that write must
    not commit with the other intents of the group, as the single path (ctx.transaction) rolls it
    back; else the refused intent could never settle."""
    intents = await _confirmed(api, 3)
    pool = api.payments.pool
    refused_intent, _ = intents[1]
    await pool.execute(
        "UPDATE intent SET hold_id = $2 WHERE id = $1", uuid.UUID(refused_intent), uuid.uuid4()
    )
    before = await pool.fetchval("SELECT count(*) FROM ledger_transfer_failed")
    ctxs = await _claim(pool, [i for i, _ in intents])
    outcomes = await asyncio.gather(
        *(settle_handler(api.payments, batch_max=10)(ctx) for ctx in ctxs), return_exceptions=True
    )
    assert isinstance(outcomes[1], LedgerRefusedError)
    assert outcomes[0] is None
    assert outcomes[2] is None
    burned = await pool.fetchval("SELECT count(*) FROM ledger_transfer_failed") - before
    assert burned == 0, f"{burned} failed-transfer id(s) of the refused intent committed with the group"


async def test_a_group_fails_an_intent_past_its_deadline_and_refuses_a_missing_one_alone(api: Api) -> None:
    intents = await _confirmed(api, 2)
    pool = api.payments.pool
    late_intent, late_payee = intents[0]
    await pool.execute(
        "UPDATE intent SET settle_deadline_at = now() - interval '1 second' WHERE id = $1",
        uuid.UUID(late_intent),
    )
    missing = str(uuid.uuid4())
    async with pool.acquire() as conn:
        await enqueue(conn, SETTLE_KIND, {"intent_id": missing}, queue=OUTBOX_QUEUE)
    ctxs = await _claim(pool, [late_intent, intents[1][0], missing])
    handle = settle_handler(api.payments, batch_max=10)
    outcomes = await asyncio.gather(*(handle(ctx) for ctx in ctxs), return_exceptions=True)
    assert outcomes[0] is None
    assert outcomes[1] is None
    assert isinstance(outcomes[2], PermanentError)
    late = (await api.client.get(f"/intents/{late_intent}")).json()
    assert (late["status"], late["failure_reason"]) == ("failed", "settlement deadline passed")
    assert await _settlements(pool, late_intent) == ["voided"]
    assert (await api.client.balance(late_payee))["posted"] == 0
    assert await _settlements(pool, intents[1][0]) == ["posted"]
    assert await _job_state(pool, ctxs[2]) == "running"


async def test_a_group_fails_an_intent_whose_hold_the_ledger_expired_and_settles_the_others(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    expired = await _confirmed(api, 1, funded=lambda: expire_holds_in_one_second(api.payments, monkeypatch))
    monkeypatch.undo()
    # The ledger's own timeout passes first for this hold (settlement stalled past it).
    expired_payer = (await api.client.get(f"/intents/{expired[0][0]}")).json()["payer_account_id"]
    await wait_until_released(api.payments, uuid.UUID(expired_payer))
    intents = [*expired, *await _confirmed(api, 1)]
    pool = api.payments.pool
    ctxs = await _claim(pool, [i for i, _ in intents])
    handle = settle_handler(api.payments, batch_max=10)
    assert await asyncio.gather(*(handle(ctx) for ctx in ctxs)) == [None, None]
    (expired_intent, expired_payee), (settled_intent, settled_payee) = intents
    failed = (await api.client.get(f"/intents/{expired_intent}")).json()
    assert (failed["status"], failed["failure_reason"]) == (
        "failed", "the ledger expired the hold before settlement",
    )  # fmt: skip
    assert await _settlements(pool, expired_intent) == ["voided"]
    assert await api.client.balance(expired_payee) == {
        "account_id": expired_payee, "ledger_account_id": str(uuid.UUID(expired_payee).int),
        "currency": "THB", "posted": 0, "pending": 0, "available": 0,
    }  # fmt: skip
    payer = failed["payer_account_id"]
    assert (await api.client.balance(payer))["available"] == FUNDING
    assert await _settlements(pool, settled_intent) == ["posted"]
    assert (await api.client.balance(settled_payee))["posted"] == AMOUNT
    assert [await _job_state(pool, ctx) for ctx in ctxs] == ["completed", "completed"]


async def test_a_group_racing_a_cancel_waits_for_it_and_leaves_the_cancelled_intent_alone(api: Api) -> None:
    intents = await _confirmed(api, 2)
    pool = api.payments.pool
    (cancelled_intent, cancelled_payee), (settled_intent, _) = intents
    ctxs = await _claim(pool, [i for i, _ in intents])
    handle = settle_handler(api.payments, batch_max=10)
    async with pool.acquire() as cancelling:
        caller = await load_service(cancelling, api.payments.box, api.client.service_id)
        assert caller is not None
        transaction = cancelling.transaction()
        await transaction.start()
        # The cancel has locked the intent, voided its holds and ended it, not yet committed.
        await cancel_intent(api.payments, cancelling, caller, uuid.UUID(cancelled_intent), [])
        group = asyncio.gather(*(handle(ctx) for ctx in ctxs), return_exceptions=True)
        try:
            await wait_for_a_waiter_behind(pool, cancelling.get_server_pid())
        finally:
            await transaction.commit()
    assert await group == [None, None]
    assert (await api.client.get(f"/intents/{cancelled_intent}")).json()["status"] == "cancelled"
    assert await _settlements(pool, cancelled_intent) == ["voided"]
    assert (await api.client.balance(cancelled_payee))["posted"] == 0
    assert await _settlements(pool, settled_intent) == ["posted"]
    assert [await _job_state(pool, ctx) for ctx in ctxs] == ["completed", "completed"]


async def test_two_jobs_of_one_intent_in_a_group_settle_it_once(api: Api) -> None:
    ((intent_id, payee),) = await _confirmed(api, 1)
    pool = api.payments.pool
    async with pool.acquire() as conn:  # the reconciler may enqueue a second job for one intent
        await enqueue(conn, SETTLE_KIND, {"intent_id": intent_id}, queue=OUTBOX_QUEUE)
    rows = await pool.fetch(
        "UPDATE job SET state = 'running', attempt = attempt + 1, lease_owner = 'first',"
        " lease_token = gen_random_uuid(), lease_expires_at = now() + interval '1 minute'"
        " WHERE kind = $1 AND payload->>'intent_id' = $2 RETURNING *",
        SETTLE_KIND, intent_id,
    )  # fmt: skip
    assert len(rows) == 2
    handle = settle_handler(api.payments, batch_max=10)
    await asyncio.gather(*(handle(_context(pool, row)) for row in rows))
    assert await _settlements(pool, intent_id) == ["posted"]
    assert (await api.client.balance(payee))["posted"] == AMOUNT
    states = await pool.fetch("SELECT state::text AS s FROM job WHERE payload->>'intent_id' = $1", intent_id)
    assert [r["s"] for r in states] == ["completed", "completed"]


async def test_a_stale_attempt_of_a_job_in_its_own_group_does_not_fail_the_other_jobs(api: Api) -> None:
    """A worker may hold two attempts of one job (the first one's lease rescued and claimed again by
    the same worker), and both handlers join one group. The group goes by attempt (id and lease
    token): the stale attempt must not be taken for the current one, which would make the group's
    completion find its token gone, roll the WHOLE group back and leave its jobs running until the
    rescuer."""
    intents = await _confirmed(api, 3)
    pool = api.payments.pool
    refused_intent, _ = intents[1]
    await pool.execute(
        "UPDATE intent SET hold_id = $2 WHERE id = $1", uuid.UUID(refused_intent), uuid.uuid4()
    )
    ctxs = await _claim(pool, [i for i, _ in intents])
    stale = ctxs[1]
    current = await _take_lease(pool, stale)  # the same worker claimed the rescued job again
    handle = settle_handler(api.payments, batch_max=10)
    outcomes = await asyncio.gather(
        handle(ctxs[0]), handle(current), handle(stale), handle(ctxs[2]), return_exceptions=True
    )
    assert outcomes[0] is None, f"an unrelated job of the group got {outcomes[0]!r}"
    assert outcomes[3] is None, f"an unrelated job of the group got {outcomes[3]!r}"
    assert isinstance(outcomes[1], LedgerRefusedError)
    for index in (0, 2):
        assert await _settlements(pool, intents[index][0]) == ["posted"]
        assert (await api.client.balance(intents[index][1]))["posted"] == AMOUNT
        assert await _job_state(pool, ctxs[index]) == "completed"


async def test_a_stale_attempt_of_a_job_in_its_group_is_not_reported_completed(api: Api) -> None:
    """Even when nothing is refused, the stale attempt (its lease lost) must not be marked
    completed_in_transaction: its caller would be told it completed the job under a lease it no
    longer has."""
    intents = await _confirmed(api, 1)
    pool = api.payments.pool
    (stale,) = await _claim(pool, [intents[0][0]])
    current = await _take_lease(pool, stale)
    handle = settle_handler(api.payments, batch_max=10)
    outcomes = await asyncio.gather(handle(current), handle(stale), return_exceptions=True)
    assert outcomes[0] is None
    assert await _settlements(pool, intents[0][0]) == ["posted"]
    assert isinstance(outcomes[1], LeaseLostError), f"the stale attempt got {outcomes[1]!r}"
    assert not stale.completed_in_transaction


async def test_a_group_announces_each_change_by_notify_and_redis_as_the_rows_say(
    api: Api, database_url: str, redis_url: str
) -> None:
    intents = await _confirmed(api, 3)
    pool = api.payments.pool
    ctxs = await _claim(pool, [i for i, _ in intents])
    notified: list[dict[str, Any]] = []
    listener = await asyncpg.connect(database_url)
    await listener.add_listener(NOTIFY_CHANNEL, lambda *args: notified.append(orjson.loads(args[3])))
    client = aioredis.from_url(redis_url)
    pubsub = client.pubsub()
    await pubsub.subscribe(*(topic(i) for i, _ in intents))
    await pubsub.get_message(timeout=1)  # the subscribe confirmations
    api.payments.publisher = RedisPublisher(client)
    try:
        await asyncio.gather(*(settle_handler(api.payments, batch_max=10)(ctx) for ctx in ctxs))
        published: list[dict[str, Any]] = []
        for _ in range(50):
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.2)
            if message is not None:
                published.append(orjson.loads(message["data"]))
            if len(published) == len(intents) and len(notified) == len(intents):
                break
    finally:
        await pubsub.aclose()
        await client.aclose()
        await listener.close()
    # The events sent were computed before the update: they must be what the rows now say.
    rows = await pool.fetch(
        "SELECT * FROM intent WHERE id = ANY($1::uuid[])", [uuid.UUID(i) for i, _ in intents]
    )
    expected = sorted((event_payload(Intent.from_row(row)) for row in rows), key=lambda e: e["intent_id"])
    assert sorted(notified, key=lambda e: e["intent_id"]) == expected
    assert sorted(published, key=lambda e: e["intent_id"]) == expected
    assert {e["status"] for e in expected} == {"settled"}
