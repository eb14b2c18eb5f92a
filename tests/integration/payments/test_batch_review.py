"""The shared settlement transaction (jobs/batch.py, settle_intent.settle_many) where a review found it
broken (each test failed before its fix, 2026-11-29): a refused intent's burned ledger ids committed
with its group (it could never settle), and a stale attempt of a job in its own group failed the
whole group or was reported completed."""

from __future__ import annotations

import asyncio
import uuid

from paymanager.application.intents.settle import settle_handler
from paymanager.application.ledger_ops import LedgerRefusedError
from paymanager.jobs import LeaseLostError
from tests.integration.payments.conftest import Api
from tests.integration.payments.test_settle_many import (
    AMOUNT,
    _claim,
    _confirmed,
    _job_state,
    _settlements,
    _take_lease,
)


async def test_a_refused_intent_writes_nothing_in_the_ledger_of_the_committed_group(api: Api) -> None:
    """settle_many's contract: a job whose outcome is an exception has NO effect in the transaction.
    The ledger burns the ids of a transiently refused chain (ledger_transfer_failed) and that write
    commits with the other intents of the group; the single path (ctx.transaction) rolls it back."""
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


async def test_a_stale_attempt_of_a_job_in_its_own_group_does_not_fail_the_other_jobs(api: Api) -> None:
    """A worker may hold two attempts of one job (the first one's lease rescued and claimed again by
    the same worker; see _completer._pending). Both handlers join one group. hold_leases and
    complete_all_in match on job id only, and settle_many answers the duplicate with None after the
    first occurrence failed: the stale attempt is 'succeeded', complete_all_in finds its token gone,
    raises LeaseLostError, the WHOLE group rolls back and every caller gets LeaseLostError; the worker
    then forgets those jobs (no failure, no release) and they stay running until the rescuer."""
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
    """Even when nothing is refused, the stale attempt (its lease lost) is 'held' by id and marked
    completed_in_transaction: its caller is told it completed the job under a lease it no longer has."""
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
