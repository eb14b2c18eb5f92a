"""Regressions a review of the session's own changes found (725e216..d5b1c74 and on; each test failed
before its fix): a comma-separated PSP_CONFIG_KEK_PREVIOUS refused, a stop leaving a job running when
a short transaction held its row, a whole dead flow replayed at once running its parent first."""

from __future__ import annotations

import asyncio
import base64
import os

import asyncpg
import pytest

from paymanager.adapters.secret_box import SecretBox
from paymanager.config import Settings
from paymanager.jobs import NewJob, admin
from paymanager.jobs._queries import Q
from paymanager.jobs.enqueue import enqueue_flow
from tests.integration.jobs.conftest import StartWorker, job_state, start_a_slow_job

# --- 1. config: a comma-separated PSP_CONFIG_KEK_PREVIOUS (as documented) is refused ---------------


def test_two_previous_keks_are_accepted_as_secret_box_accepts_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """PSP_CONFIG_KEK_PREVIOUS is "comma-separated earlier KEKs" (SecretBox.from_config splits it on
    ','); Settings now base64-decodes the whole string, so a deployment after its second rotation
    (or with the variable set empty) no longer starts."""
    current, old1, old2 = (base64.b64encode(os.urandom(32)).decode() for _ in range(3))
    previous = f"{old1},{old2}"
    SecretBox.from_config(current, previous)  # what start-up uses: fine
    monkeypatch.setenv("PSP_CONFIG_KEK", current)
    monkeypatch.setenv("PSP_CONFIG_KEK_PREVIOUS", previous)
    Settings(_env_file=None)  # type: ignore[call-arg]


# --- 2. worker stop: a release skips a row a heartbeat is updating at that moment ------------------


async def test_stop_gives_back_a_job_whose_row_a_heartbeat_holds_for_a_moment(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    """`stop` releases with FOR UPDATE SKIP LOCKED (so a settlement transaction still open on a row
    cannot hold the shutdown). A short holder of the row at that moment (a heartbeat UPDATE in flight,
    an admin query; simulated here for 0.5 s) made the release skip the job: it stayed `running`
    under its lease, was rescued only when that expired, and the rescue counted a stall. Now the
    heartbeat stops before the release and the release tries again for up to a second."""
    worker, job = await start_a_slow_job(pool, start_worker)
    async with pool.acquire() as hb:
        tx = hb.transaction()
        await tx.start()
        # Exactly what job_heartbeat_many writes, its transaction still open.
        await hb.execute("UPDATE job SET lease_expires_at = lease_expires_at WHERE id = $1", job.id)
        stop = asyncio.create_task(worker.stop(timeout_s=0.2))
        await asyncio.sleep(0.5)
        await tx.commit()
    await stop
    assert await job_state(pool, job.id) == "available"


# --- 3. replay: a whole dead flow replayed at once runs its parent before its child ------------------


async def test_replaying_a_dead_flow_with_its_dead_child_waits_for_the_child(pool: asyncpg.Pool) -> None:
    """`replay_dead` (no filter, the usual "replay everything after the outage") revives the parent
    and its dead child in ONE statement: the parent's count of unfinished children reads the child
    as still dead, so it becomes `available` with pending_children 0; job_child_revived then finds
    it not waiting and adds nothing. The parent runs before (and without the result of) its child."""
    async with pool.acquire() as conn, conn.transaction():
        parent, (child,) = await enqueue_flow(
            conn, NewJob("parent", queue="p"), [NewJob("child", queue="qa")], on_child_dead="fail"
        )
    rows = await pool.fetch(Q["job_claim_batch"], ["qa"], [1], "w", 60_000, [], [], [], False, False)
    token = rows[0]["lease_token"]
    await pool.fetch(
        Q["job_fail_many"], [child], [token], ["dead"], [None], [{"error": "boom", "type": "X"}], [True]
    )
    assert await job_state(pool, parent) == "dead"
    assert sorted(await admin.replay_dead(pool)) == sorted([parent, child])
    assert await job_state(pool, child) == "available"
    assert await job_state(pool, parent) == "waiting_children"
