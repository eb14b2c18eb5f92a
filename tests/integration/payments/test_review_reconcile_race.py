"""Review finding: the reconciler racing a settlement that is committing re-enqueues a settled intent."""

from __future__ import annotations

import asyncio
import uuid

from paymanager.application.intents.confirm import SETTLE_KIND
from paymanager.application.intents.reconcile import reconcile
from paymanager.application.intents.settle import settle
from tests.integration.payments.conftest import Api
from tests.integration.payments.test_reconcile_and_worker import _confirmed_p2p, _jobs


async def test_the_reconciler_does_not_re_enqueue_an_intent_settled_while_it_ran(api: Api) -> None:
    # The settlement job's transaction (settle, then the job's completion) is open while the
    # reconciler runs. The intent had a live job all along: no new job, no "no live job" alarm.
    intent_id, _, _ = await _confirmed_p2p(api)
    async with api.payments.pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        updated = await settle(api.payments, conn, uuid.UUID(intent_id), settled_by="test")
        assert updated is not None
        await conn.execute(
            "UPDATE job SET state = 'completed', finalized_at = now()"
            " WHERE kind = $1 AND payload->>'intent_id' = $2",
            SETTLE_KIND,
            intent_id,
        )
        # The intent's row is locked by the settling transaction: the reconciler skips it (its
        # holder is handling it) instead of waiting, and enqueues nothing for it.
        report = await asyncio.wait_for(reconcile(api.payments, batch_size=10, max_intents=100), 10)
        await tx.commit()
    assert (await api.client.get(f"/intents/{intent_id}")).json()["status"] == "settled"
    assert report.reenqueued == 0
    assert await _jobs(api, intent_id) == 1
