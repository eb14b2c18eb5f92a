from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from paymanager.jobs import (
    DeadJob,
    JobContext,
    MaintenanceOptions,
    NewJob,
    PeriodicJob,
    Registry,
    Retention,
    admin,
    enqueue,
    enqueue_many,
)
from paymanager.jobs._queries import Q
from paymanager.jobs.maintenance import Maintenance
from paymanager.jobs.periodic import current_slot, enqueue_due
from paymanager.jobs.pruner import prune_finished
from tests.integration.jobs.conftest import StartWorker, job_state, wait_state, wait_until
from tests.support.databases import run_sync
from tests.support.examples import examples
from tests.support.job_steps import claim, complete, flow
from tests.support.locks import finishes_without_waiting
from tests.support.waiting import wait_for_lock_waiters


async def claim_as_ghost(pool: asyncpg.Pool, queue: str = "default", lease_ms: int = 1) -> list[int]:
    """Claim jobs as a worker that then vanishes (its lease expires almost at once)."""
    from paymanager.jobs._queries import Q

    rows = await pool.fetch(Q["job_claim_batch"], [queue], [100], "ghost", lease_ms, [], [], [], False, False)
    return [r["id"] for r in rows]


def an_hour_later() -> datetime:
    """The rescuer's clock when every lease taken by now has expired."""
    return datetime.now(UTC) + timedelta(hours=1)


async def test_rescuer_returns_expired_jobs_to_available_without_spending_an_attempt(
    pool: asyncpg.Pool, database_url: str
) -> None:
    job = await enqueue(pool, "k", {})
    assert await claim_as_ghost(pool) == [job.id]
    maintenance = Maintenance(pool, database_url, MaintenanceOptions(max_stalled=2), clock=an_hour_later)
    await maintenance.rescue()
    row = await pool.fetchrow(
        "SELECT state, attempt, stalled_count, lease_token FROM job WHERE id = $1", job.id
    )
    assert row is not None
    assert dict(row) == {"state": "available", "attempt": 0, "stalled_count": 1, "lease_token": None}


async def test_job_stalled_beyond_max_stalled_is_dead_and_hooked(
    pool: asyncpg.Pool, database_url: str
) -> None:
    dead: list[DeadJob] = []

    async def on_dead(job: DeadJob) -> None:
        dead.append(job)

    maintenance = Maintenance(
        pool, database_url, MaintenanceOptions(max_stalled=1), on_dead=on_dead, clock=an_hour_later
    )
    job = await enqueue(pool, "k", {})
    for expected in ("available", "dead"):
        await claim_as_ghost(pool)
        await maintenance.rescue()
        assert await pool.fetchval("SELECT state FROM job WHERE id = $1", job.id) == expected
    assert [d.id for d in dead] == [job.id]
    assert dead[0].error is not None
    assert dead[0].error["type"] == "Stalled"


async def test_live_lease_is_not_rescued(pool: asyncpg.Pool, database_url: str) -> None:
    job = await enqueue(pool, "k", {})
    await claim_as_ghost(pool, lease_ms=60_000)
    await Maintenance(pool, database_url).rescue()
    assert await pool.fetchval("SELECT state FROM job WHERE id = $1", job.id) == "running"


async def test_a_running_job_asked_to_cancel_is_cancelled_not_run_again_when_its_lease_expires(
    pool: asyncpg.Pool, database_url: str
) -> None:
    """cancel_job answers "requested" for a running job. If its worker then dies, the rescuer ends the
    job `cancelled`, as the worker would have, instead of putting it back to run again in full."""
    job = await enqueue(pool, "k", {})
    await claim(pool, "default")
    result = await admin.cancel_job(pool, job.id)
    assert result is not None
    assert result.outcome == "requested"
    later = datetime.now(UTC) + timedelta(hours=1)  # the dead worker's lease has expired
    await Maintenance(pool, database_url, MaintenanceOptions(max_stalled=2), clock=lambda: later).rescue()
    assert await job_state(pool, job.id) == "cancelled"


async def test_rescuer_skips_an_expired_job_whose_row_is_locked_and_rescues_the_others(
    pool: asyncpg.Pool, database_url: str
) -> None:
    """A shared settlement transaction locks the rows of the jobs it completes (hold_leases): the
    rescuer must neither wait for it nor take the job from under it."""
    locked, free = (await enqueue(pool, "k", {})).id, (await enqueue(pool, "k", {})).id
    await claim_as_ghost(pool, lease_ms=60_000)
    later = datetime.now(UTC) + timedelta(hours=1)
    maintenance = Maintenance(pool, database_url, clock=lambda: later)
    async with pool.acquire() as holder:
        held = holder.transaction()
        await held.start()
        await holder.execute("SELECT 1 FROM job WHERE id = $1 FOR UPDATE", locked)
        finished, rescue = await finishes_without_waiting(pool, holder.get_server_pid(), maintenance.rescue())
        await held.rollback()  # lets a rescue that did wait end, before the test fails
        await rescue
    assert finished, "the rescuer waited for a locked job instead of skipping it"
    states = dict(await pool.fetch("SELECT id, state::text FROM job"))
    assert states == {locked: "running", free: "available"}


async def test_pruner_keeps_recent_and_newest_finished_jobs(pool: asyncpg.Pool, database_url: str) -> None:
    ids = await enqueue_many(pool, [NewJob("k", queue="q") for _ in range(10)])
    await pool.execute(
        "UPDATE job SET state = 'completed', finalized_at = now() - (id - $1) * interval '1 minute' "
        "WHERE id = ANY($2)",
        ids[0],
        ids,
    )
    other = await enqueue(pool, "k", {}, queue="q")  # unfinished: never pruned
    options = MaintenanceOptions(
        retention=Retention(completed_age_ms=None, completed_count=100),
        retention_by_queue={"q": Retention(completed_age_ms=5 * 60_000 + 30_000, completed_count=3)},
        prune_batch_max=2,
    )
    await Maintenance(pool, database_url, options).prune()
    left = [r["id"] for r in await pool.fetch("SELECT id FROM job ORDER BY id")]
    # Age keeps the 6 newest (0..5 minutes old); count keeps 3 of those; the queued job stays.
    assert left == [*ids[:3], other.id]


async def test_pruning_keeps_the_completed_children_of_a_parent_still_waiting(pool: asyncpg.Pool) -> None:
    """Retention by count or age must not delete a flow's completed children while a sibling still
    runs: the parent then runs with `ctx.children_results()` missing their results."""
    parent, a, b = await flow(pool, "fail")
    (token_a,) = (await claim(pool, "qa")).values()
    await complete(pool, a, token_a, 10)
    await admin.prune(pool, Retention(completed_age_ms=None, completed_count=0))
    (token_b,) = (await claim(pool, "qb")).values()
    await complete(pool, b, token_b, 20)
    assert await job_state(pool, parent) == "available"
    results = {r["id"]: r["result"] for r in await pool.fetch(Q["job_children_results"], parent)}
    assert results == {a: 10, b: 20}


async def test_count_pruning_does_not_delete_a_dead_job_revived_meanwhile(pool: asyncpg.Pool) -> None:
    """job_prune_beyond_count picks its rows without a lock: a job an admin
    retries while the prune runs must not be deleted once the retry commits (the DELETE re-checks the
    new row version), since the retry told the operator that the job is available."""
    job = await enqueue(pool, "k", {}, queue="q")
    await pool.execute("UPDATE job SET state = 'dead', finalized_at = now() WHERE id = $1", job.id)
    async with pool.acquire() as operator:
        tx = operator.transaction()
        await tx.start()
        assert await admin.retry_job(operator, job.id)
        prune = asyncio.create_task(
            admin.prune(
                pool, Retention(completed_age_ms=None, completed_count=None, dead_age_ms=None, dead_count=0)
            )
        )
        await wait_for_lock_waiters(pool)  # the prune picked the job dead and waits on its row
        await tx.commit()
    await prune
    assert await pool.fetchval("SELECT state::text FROM job WHERE id = $1", job.id) == "available"


async def test_age_pruning_does_not_delete_a_dead_job_revived_meanwhile(pool: asyncpg.Pool) -> None:
    """job_prune_older picks its rows without a lock too: a job an admin retries while the prune
    runs stays (the DELETE re-checks the new row version once the retry commits)."""
    job = await enqueue(pool, "k", {}, queue="q")
    await pool.execute(
        "UPDATE job SET state = 'dead', finalized_at = now() - interval '1 hour' WHERE id = $1", job.id
    )
    async with pool.acquire() as operator:
        tx = operator.transaction()
        await tx.start()
        assert await admin.retry_job(operator, job.id)
        prune = asyncio.create_task(
            admin.prune(
                pool, Retention(completed_age_ms=None, completed_count=None, dead_age_ms=0, dead_count=None)
            )
        )
        await wait_for_lock_waiters(pool)  # the prune picked the job dead and waits on its row
        await tx.commit()
    assert await prune == 0
    assert await pool.fetchval("SELECT state::text FROM job WHERE id = $1", job.id) == "available"


async def test_periodic_job_is_enqueued_once_per_slot_however_many_processes(
    pool: asyncpg.Pool, database_url: str
) -> None:
    now = [datetime(2030, 1, 1, 12, 0, 0, 500_000, tzinfo=UTC)]
    schedule = PeriodicJob("sweep", "sweep.run", interval_ms=60_000)
    options = MaintenanceOptions(periodic=(schedule,))
    services = [Maintenance(pool, database_url, options, clock=lambda: now[0]) for _ in range(3)]
    for _ in range(5):  # 12:00:00.5, 12:00:40.5, 12:01:20.5, 12:02:00.5, 12:02:40.5
        await asyncio.gather(*(s.periodic() for s in services))
        now[0] += timedelta(seconds=40)
        # A worker finishes each run before the next slot (an unfinished run would hold the next back).
        await pool.execute(
            "UPDATE job SET state = 'completed', finalized_at = now()"
            " WHERE kind = 'sweep.run' AND state <> 'completed'"
        )
    rows = await pool.fetch("SELECT payload FROM job WHERE kind = 'sweep.run' ORDER BY id")
    # Slots 12:00 (first sight, recorded only), 12:01 and 12:02: two jobs, one per new slot.
    assert [r["payload"]["slot"] for r in rows] == [
        "2030-01-01T12:01:00+00:00",
        "2030-01-01T12:02:00+00:00",
    ]


async def test_periodic_slots_are_skipped_while_a_run_is_unfinished(
    pool: asyncpg.Pool, database_url: str
) -> None:
    """No worker serves the queue: runs must not pile up one per slot behind the waiting one."""
    now = [datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC)]
    options = MaintenanceOptions(periodic=(PeriodicJob("sweep", "sweep.run", interval_ms=60_000),))
    maintenance = Maintenance(pool, database_url, options, clock=lambda: now[0])
    for _ in range(6):
        await maintenance.periodic()
        now[0] += timedelta(minutes=1)
    assert await pool.fetchval("SELECT count(*) FROM job WHERE kind = 'sweep.run'") == 1
    await pool.execute("UPDATE job SET state = 'completed', finalized_at = now() WHERE kind = 'sweep.run'")
    await maintenance.periodic()
    assert await pool.fetchval("SELECT count(*) FROM job WHERE kind = 'sweep.run'") == 2


def test_cron_slot_is_the_latest_at_or_before_now() -> None:
    job = PeriodicJob("hourly", "k", cron="0 * * * *")
    assert current_slot(job, datetime(2030, 1, 1, 12, 0, tzinfo=UTC)) == datetime(
        2030, 1, 1, 12, 0, tzinfo=UTC
    )
    assert current_slot(job, datetime(2030, 1, 1, 12, 59, tzinfo=UTC)) == datetime(
        2030, 1, 1, 12, 0, tzinfo=UTC
    )


def test_periodic_job_needs_exactly_one_schedule() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        PeriodicJob("x", "k")
    with pytest.raises(ValueError, match="invalid cron"):
        PeriodicJob("x", "k", cron="every minute")


async def test_a_schedule_whose_queue_is_full_does_not_hold_back_the_others(pool: asyncpg.Pool) -> None:
    await admin.set_max_depth(pool, "full", 1)
    await enqueue(pool, "filler", {}, queue="full")
    schedules = (
        PeriodicJob("stuck", "tick.run", queue="full", interval_ms=1_000),
        PeriodicJob("fine", "tick.run", queue="default", interval_ms=1_000),
    )
    now = datetime.now(UTC)
    assert await enqueue_due(pool, schedules, now) == []  # first sight: slots recorded
    later = now + timedelta(seconds=5)
    (created,) = await enqueue_due(pool, schedules, later)
    assert await pool.fetchval("SELECT queue FROM job WHERE id = $1", created) == "default"
    # The full queue's slot was not taken: once there is room, the next tick enqueues it.
    await admin.set_max_depth(pool, "full", None)
    (again,) = await enqueue_due(pool, schedules, later)
    assert await pool.fetchval("SELECT queue FROM job WHERE id = $1", again) == "full"


def test_a_schedule_with_a_bad_kind_or_queue_is_refused_when_it_is_made() -> None:
    with pytest.raises(ValueError, match="kind and queue"):
        PeriodicJob("bad", "no spaces allowed", interval_ms=1_000)
    with pytest.raises(ValueError, match="kind and queue"):
        PeriodicJob("bad", "tick.run", queue="", interval_ms=1_000)


async def test_a_periodic_enqueue_into_a_full_queue_does_not_stop_maintenance_cluster_wide(
    pool: asyncpg.Pool, database_url: str
) -> None:
    """The periodic duty's enqueue raises QueueFullError (an EnqueueError) when its queue is at max
    depth. Were the leader's task to end with it, its lock connection would stay open and the
    advisory lock held: no process would rescue, promote, prune or schedule again until that process
    restarts."""
    await admin.set_max_depth(pool, "full", 1)
    await enqueue(pool, "filler", {}, queue="full")
    offset = [timedelta(0)]

    def clock() -> datetime:
        return datetime.now(UTC) + offset[0]

    options = MaintenanceOptions(
        periodic=(PeriodicJob("tick", "tick.run", queue="full", interval_ms=1_000),),
        periodic_interval_ms=20,
        rescue_interval_ms=20,
        promote_interval_ms=20,
        election_interval_ms=20,
        vacuum_interval_ms=None,
    )
    leader = Maintenance(pool, database_url, options, clock=clock)
    follower = Maintenance(pool, database_url, options, clock=clock)
    try:
        await leader.start()

        async def elected() -> bool:
            return leader.is_leader

        await wait_until(elected, 5)
        await follower.start()

        async def first_slot_recorded() -> bool:
            return bool(await pool.fetchval("SELECT count(*) FROM job_periodic WHERE name = 'tick'"))

        await wait_until(first_slot_recorded)
        with capture_logs() as logs:
            offset[0] = timedelta(seconds=5)  # a new slot: its enqueue finds the queue full

            async def enqueue_refused() -> bool:
                return any(log["event"] == "periodic job not enqueued" for log in logs)

            await wait_until(enqueue_refused, 5)

        job = await enqueue(pool, "k", {})
        assert list(await claim(pool, "default", lease_ms=1)) == [job.id]  # a worker that died

        async def rescued() -> bool:
            return await job_state(pool, job.id) == "available"

        try:
            await wait_until(rescued, 3)
        except AssertionError:
            task = leader._task
            died = task.exception() if task is not None and task.done() else None
            raise AssertionError(
                f"expired lease never rescued: leader task done={task is not None and task.done()} "
                f"with {died!r}; leader.is_leader={leader.is_leader}, follower.is_leader={follower.is_leader}"
            ) from None
    finally:
        for m in (leader, follower):
            with contextlib.suppress(Exception):
                await m.stop(1)


async def test_one_leader_at_a_time_and_a_follower_takes_over(pool: asyncpg.Pool, database_url: str) -> None:
    options = MaintenanceOptions(election_interval_ms=50, rescue_interval_ms=50)
    first = Maintenance(pool, database_url, options)
    second = Maintenance(pool, database_url, options)
    await first.start()

    async def first_leads() -> bool:
        return first.is_leader

    await wait_until(first_leads)
    leader_pid = first._lock_conn.get_server_pid()
    await second.start()

    async def second_tried() -> bool:
        # The follower's lock connection has run the election's try-lock and is idle again.
        return bool(
            await pool.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'paymanager:job-leader'"
                " AND datname = current_database() AND pid <> $1 AND state = 'idle' AND query = $2",
                leader_pid,
                Q["job_leader_try_lock"].strip(),
            )
        )

    await wait_until(second_tried)
    holders = await pool.fetch(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
        " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    )
    assert [r["pid"] for r in holders] == [leader_pid]
    assert not second.is_leader
    await first.stop(timeout_s=2)

    async def second_leads() -> bool:
        return second.is_leader

    await wait_until(second_leads)
    await second.stop(timeout_s=2)


async def test_worker_heartbeat_keeps_a_long_job_from_being_rescued(
    pool: asyncpg.Pool, database_url: str, start_worker: StartWorker
) -> None:
    release = asyncio.Event()
    attempts: list[int] = []
    registry = Registry()

    @registry.handler("long")
    async def long(ctx: JobContext) -> None:
        attempts.append(ctx.attempt)
        await release.wait()

    await start_worker(registry)  # lease 2 s, heartbeat every 0.5 s
    maintenance = Maintenance(pool, database_url, MaintenanceOptions(rescue_interval_ms=100))
    await maintenance.start()
    try:
        job = await enqueue(pool, "long", {})
        await wait_state(pool, job.id, "running")
        # Time passing is the behaviour under test: two and a half leases with the rescuer running,
        # which would rescue the job were its heartbeats not extending its lease.
        await asyncio.sleep(5)
        assert await pool.fetchval("SELECT stalled_count FROM job WHERE id = $1", job.id) == 0
        release.set()
        await wait_state(pool, job.id, "completed")
        assert attempts == [1]
    finally:
        await maintenance.stop(timeout_s=2)


async def test_vacuum_duty_makes_pruned_space_reusable(pool: asyncpg.Pool, database_url: str) -> None:
    ids = await enqueue_many(pool, [NewJob("k", {"pad": "x" * 500}, queue="q") for _ in range(2_000)])
    await pool.execute("DELETE FROM job WHERE id = ANY($1)", ids)
    await Maintenance(pool, database_url).vacuum()
    row = await pool.fetchrow("SELECT last_vacuum, n_dead_tup FROM pg_stat_user_tables WHERE relname = 'job'")
    assert row is not None
    assert row["last_vacuum"] is not None


async def test_count_pruning_keeps_the_newest_by_id_among_jobs_finished_together(pool: asyncpg.Pool) -> None:
    """A batch of completions shares one finish time: retention by count still keeps exactly the
    newest `keep` of them, by id after the finish time."""
    ids = await enqueue_many(pool, [NewJob("k", queue="q") for _ in range(10)])
    await pool.execute("UPDATE job SET state = 'completed', finalized_at = now() WHERE id = ANY($1)", ids)
    await admin.prune(pool, Retention(completed_age_ms=None, completed_count=3), batch_max=2)
    assert [r["id"] for r in await pool.fetch("SELECT id FROM job ORDER BY id")] == ids[-3:]


async def test_pruning_completed_jobs_goes_on_past_the_ones_it_must_keep(pool: asyncpg.Pool) -> None:
    """Completed jobs are deleted along the primary key, a batch at a time, each after the last:
    jobs kept on the way (another queue's, a running one, the newest) do not stop the walk, and
    every older completed job of the queue goes in one run."""
    ids = await enqueue_many(pool, [NewJob("k", queue="q" if i % 3 else "other") for i in range(30)])
    mine = [job_id for i, job_id in enumerate(ids) if i % 3]
    theirs = [job_id for i, job_id in enumerate(ids) if not i % 3]
    running = await enqueue(pool, "k", {}, queue="q")
    await pool.execute(
        "UPDATE job SET state = 'completed', finalized_at = now() - (100 - id + $1) * interval '1 second' "
        "WHERE id = ANY($2)",
        ids[0],
        ids,
    )
    await claim(pool, "q")
    deleted = await admin.prune(
        pool,
        Retention(completed_age_ms=None, completed_count=100),
        retention_by_queue={"q": Retention(completed_age_ms=None, completed_count=4)},
        batch_max=3,
    )
    assert deleted == len(mine) - 4
    left = [r["id"] for r in await pool.fetch("SELECT id FROM job ORDER BY id")]
    assert left == sorted([*theirs, *mine[-4:], running.id])


# (queue, state, minutes before now it finished): ties of finish time are likely, as in a batch.
RETAINED_JOBS = st.lists(
    st.tuples(
        st.sampled_from(["q", "other"]),
        st.sampled_from(["completed", "dead", "available"]),
        st.integers(0, 8),
    ),
    max_size=30,
)


@settings(
    max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    jobs=RETAINED_JOBS,
    keep=st.none() | st.integers(0, 6),
    age_min=st.none() | st.integers(0, 8),
    batch_max=st.integers(1, 4),
)
# Each rule lets a different job go (the count the one 7 minutes old, the age the one 6 minutes old
# too): the two bounds differ, so every run checks that the later one is applied.
@example(jobs=[("q", "completed", m) for m in (1, 2, 6, 7)], keep=3, age_min=5, batch_max=2)
def test_retention_deletes_exactly_the_completed_jobs_a_rule_lets_go(
    database_url: str, jobs: list[tuple[str, str, int]], keep: int | None, age_min: int | None, batch_max: int
) -> None:
    """Against a model: per queue, a completed job goes when it is not among the newest `keep` by
    finish time then id, or finished more than `age_min` minutes ago; nothing else is deleted."""
    now = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)

    async def scenario() -> None:
        conn = await asyncpg.connect(database_url)
        try:
            await conn.execute("TRUNCATE job")
            rows = []
            for queue, state, minutes in jobs:
                job_id = await conn.fetchval(
                    "INSERT INTO job (queue, kind, payload, state, finalized_at)"
                    " VALUES ($1, 'k', '{}', $2::job_state,"
                    "         CASE WHEN $2 <> 'available' THEN $3::timestamptz END)"
                    " RETURNING id",
                    queue,
                    state,
                    now - timedelta(minutes=minutes),
                )
                rows.append((job_id, queue, state, minutes))
            retention = Retention(
                completed_age_ms=None if age_min is None else age_min * 60_000,
                completed_count=keep,
                dead_age_ms=None,
                dead_count=None,
            )
            await admin.prune(conn, retention, now=now, batch_max=batch_max)
            left = {r["id"] for r in await conn.fetch("SELECT id FROM job")}
        finally:
            await conn.close()
        expected = {job_id for job_id, _, state, _ in rows if state != "completed"}
        for queue in ("q", "other"):
            # Newest first: finished fewest minutes ago, then the higher id.
            completed = sorted(
                (
                    (-minutes, job_id)
                    for job_id, q, state, minutes in rows
                    if q == queue and state == "completed"
                ),
                reverse=True,
            )
            for rank, (minus_minutes, job_id) in enumerate(completed):
                kept_by_count = keep is None or rank < keep
                kept_by_age = age_min is None or -minus_minutes <= age_min
                if kept_by_count and kept_by_age:
                    expected.add(job_id)
        assert left == expected

    run_sync(scenario())


class StatementLog:
    """A connection that notes the name of every engine statement run through it."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self._conn = conn
        self._names = {sql: name for name, sql in Q.items()}
        self.names: list[str] = []

    async def fetch(self, query: str, *args: object) -> list[asyncpg.Record]:
        self.names.append(self._names.get(query, "?"))
        return await self._conn.fetch(query, *args)


async def test_a_queue_no_rule_can_prune_costs_no_read_of_the_table(pool: asyncpg.Pool) -> None:
    """Completed jobs have no index, so each rule's search reads the table: the pruner asks only
    where the run's one read of the table shows that a rule has something to delete."""
    ids = await enqueue_many(pool, [NewJob("k", queue=q) for q in ("idle", "idle", "busy", "busy", "busy")])
    await pool.execute(
        "UPDATE job SET state = 'completed', finalized_at = now() - interval '1 minute' WHERE id = ANY($1)",
        ids,
    )
    retention = Retention(completed_age_ms=3_600_000, completed_count=2, dead_age_ms=None, dead_count=None)
    async with pool.acquire() as conn:
        statements = StatementLog(conn)
        deleted = await prune_finished(statements, lambda queue: retention, now=None, batch_max=10)
    assert deleted == 1  # busy's oldest: it holds 3, keeps 2; idle holds 2, and none is an hour old
    assert statements.names == ["job_finished_queues", "job_completed_kept_oldest", "job_prune_completed"]
