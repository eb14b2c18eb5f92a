"""The job engine's store: the one reader of jobs.sql.

Every statement of the engine's hot loops and maintenance is called here by name, with keyword
arguments (or a parameter dataclass for a wide statement), and returns frozen dataclasses or plain
values, never rows: a change of a column touches this module and one dataclass. `db` is whatever runs
the statement: a pool, a connection, a pinned connection or the LISTEN connection (`Executor`).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, TypeAlias

import asyncpg

from paymanager.jobs._outcomes import Completion, Failure
from paymanager.jobs._queries import Q
from paymanager.jobs.states import JobState

# A JSON object as the codecs of paymanager.db.pool decode it.
JsonObject: TypeAlias = dict[str, object]


class Executor(Protocol):
    """What runs a statement: asyncpg's Pool and Connection, PinnedConnection, the Listener."""

    async def fetch(self, query: str, *args: object) -> list[asyncpg.Record]: ...


# --- claiming ----------------------------------------------------------------------------------------


# Not frozen: one Job is made per claimed job, and a frozen dataclass sets each field through
# object.__setattr__ (about three times the cost of this one's plain slots).
@dataclass(slots=True)
class Job:
    """A job as a claim hands it to the worker: running, under `lease_token`."""

    id: int
    queue: str
    kind: str
    payload: JsonObject
    priority: int
    attempt: int
    # NULL in the row: the registered kind's default, resolved by the worker.
    max_attempts: int | None
    backoff: JsonObject | None
    timeout_ms: int | None
    lease_token: uuid.UUID
    parent_id: int | None
    cancel_requested: bool
    # Seconds from when the job was due to its claim, by the database's clock (the limited claim
    # function does not return it: None).
    waited_s: float | None = None

    @classmethod
    def from_claim_row(cls, row: asyncpg.Record) -> Job:
        """A row of the plain claim statements (job_claim_batch, job_claim, job_claim_queue), whose
        columns are `claimed` and then this class's fields, in order (a test holds them to it): read
        by position, not by name, as it runs once per claimed job."""
        return cls(*row[1:])

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> Job:
        # Positional: one Job per claimed job, and keyword arguments cost more.
        return cls(
            row["id"], row["queue"], row["kind"], row["payload"], row["priority"], row["attempt"],
            row["max_attempts"], row["backoff"], row["timeout_ms"], row["lease_token"], row["parent_id"],
            row["cancel_requested"], row.get("waited_s"),
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class ClaimParams:
    """One claim: up to `wanted[i]` jobs of `queues[i]` for `owner`, each leased for `lease_ms`;
    the `completions` of the previous batch are written by the same statement."""

    queues: Sequence[str]
    wanted: Sequence[int]
    owner: str
    lease_ms: int
    # A claim that completes nothing commits without waiting for its WAL flush (WorkerOptions).
    quick_commit: bool
    completions: Sequence[Completion] = ()
    # Publish `completed` events for the completions (a NOTIFY per 25).
    notify_completed: bool = True
    # The completions delete their jobs' rows (job_claim_batch_deleting): no parent among them.
    delete_completed: bool = False
    # Queues with limits claimed by the same statement, after the completions, up to
    # `limited_wanted[i]` jobs each within their limits (job_claim_batch_limited).
    limited: Sequence[str] = ()
    limited_wanted: Sequence[int] = ()


@dataclass(frozen=True, slots=True)
class Claimed:
    jobs: list[Job]
    # The ids the claim's statement completed (of `ClaimParams.completions`).
    completed: set[int]
    # The limited queues of the claim held back: for how many ms their limits start nothing more,
    # or None for a queue being claimed by another process at that moment (try it again).
    held_back: dict[str, int | None] = field(default_factory=dict)


async def claim(db: Executor, params: ClaimParams) -> Claimed:
    """Claim, and complete the previous batch, in one statement.

    Three statements serve it (jobs.sql says why each exists; a test holds them to the same jobs):
    `job_claim_batch` when there are completions to write (`job_claim_batch_deleting` when they
    delete their jobs), `job_claim_queue` for an idle worker's
    claim from one queue, `job_claim` for one from several. With limited queues to take along,
    `job_claim_batch_limited` (or its deleting form) serves it, with or without completions."""
    p = params
    if p.limited:
        return await _claim_with_limited(db, p)
    if p.completions:
        rows = await db.fetch(
            Q["job_claim_batch_deleting" if p.delete_completed else "job_claim_batch"],
            p.queues, p.wanted, p.owner, p.lease_ms,
            [c.id for c in p.completions], [c.token for c in p.completions],
            _results(p.completions), p.notify_completed, False,
        )  # fmt: skip
        jobs: list[Job] = []
        completed: set[int] = set()
        for row in rows:
            if row["claimed"]:
                jobs.append(Job.from_claim_row(row))
            else:
                completed.add(row["id"])
        return Claimed(jobs, completed)
    if len(p.queues) == 1:
        rows = await db.fetch(
            Q["job_claim_queue"], p.queues[0], p.wanted[0], p.owner, p.lease_ms, p.quick_commit
        )
    else:
        rows = await db.fetch(Q["job_claim"], p.queues, p.wanted, p.owner, p.lease_ms, p.quick_commit)
    return Claimed([Job.from_claim_row(row) for row in rows], set())


async def _claim_with_limited(db: Executor, p: ClaimParams) -> Claimed:
    rows = await db.fetch(
        Q["job_claim_batch_limited_deleting" if p.delete_completed else "job_claim_batch_limited"],
        p.queues, p.wanted, p.owner, p.lease_ms,
        [c.id for c in p.completions], [c.token for c in p.completions],
        _results(p.completions), p.notify_completed, p.quick_commit and not p.completions,
        p.limited, p.limited_wanted,
    )  # fmt: skip
    jobs: list[Job] = []
    completed: set[int] = set()
    held_back: dict[str, int | None] = {}
    for row in rows:
        if row["claimed"]:
            # Job's fields, then retry_after_ms.
            jobs.append(Job(*row[1:-1]))
        elif row["id"] is not None:
            completed.add(row["id"])
        else:
            retry_after_ms = row["retry_after_ms"]
            held_back[row["queue"]] = None if retry_after_ms is None else int(retry_after_ms)
    return Claimed(jobs, completed, held_back)


def _results(completions: Sequence[Completion]) -> list[Any] | None:
    """The completions' results as the statements take them: NULL when none has one (most jobs
    return nothing), which the statements' unnest reads as a NULL result for every job, and which
    spares encoding an array of NULLs, element by element, with every claim."""
    if all(c.result is None for c in completions):
        return None
    return [c.result for c in completions]


@dataclass(frozen=True, slots=True)
class LimitedClaim:
    """What a claim of a limited queue got, how long the queue may start nothing more (None: it
    may go on), and the ids of the completions its statement wrote."""

    jobs: list[Job]
    retry_after_ms: int | None
    completed: set[int] = field(default_factory=set)


async def claim_limited(
    db: Executor,
    *,
    queue: str,
    wanted: int,
    owner: str,
    lease_ms: int,
    quick_commit: bool,
    completions: Sequence[Completion] = (),
    notify_completed: bool = True,
    delete_completed: bool = False,
) -> LimitedClaim:
    """Claim up to `wanted` jobs of a queue with limits, within them, after writing `completions`
    (job_claim_limited: the slots the completions free count for this claim). `quick_commit` is
    ignored when there are completions: they must be durable."""
    rows = await db.fetch(
        Q["job_claim_limited"], queue, wanted, owner, lease_ms, quick_commit and not completions,
        [c.id for c in completions], [c.token for c in completions], _results(completions),
        notify_completed, delete_completed,
    )  # fmt: skip
    jobs: list[Job] = []
    completed: set[int] = set()
    retry_after_ms: int | None = None
    for row in rows:
        if row["claimed"]:
            jobs.append(Job.from_row(row))
        elif row["retry_after_ms"] is not None:
            retry_after_ms = int(row["retry_after_ms"])
        else:
            completed.add(row["id"])
    return LimitedClaim(jobs, retry_after_ms, completed)


async def promote_due(db: Executor, *, now: datetime | None, batch_max: int) -> None:
    """Make up to `batch_max` scheduled and retryable jobs due at `now` (None: the server's clock)
    available, waking their queues."""
    await db.fetch(Q["job_promote_due"], now, batch_max)


# --- outcomes ----------------------------------------------------------------------------------------


async def complete_many(
    db: Executor, completions: Sequence[Completion], *, notify_completed: bool, delete: bool = False
) -> set[int]:
    """Complete the jobs still held under the completions' lease tokens; returns their ids.
    `delete`: their rows are deleted (job_complete_many_deleting); none of them has a parent."""
    rows = await db.fetch(
        Q["job_complete_many_deleting" if delete else "job_complete_many"],
        [c.id for c in completions],
        [c.token for c in completions],
        _results(completions),
        notify_completed,
    )
    return {row["id"] for row in rows}


async def fail_many(db: Executor, failures: Sequence[Failure]) -> set[int]:
    """Write failed (or snoozed, or given back) attempts still held; returns the ids written."""
    rows = await db.fetch(
        Q["job_fail_many"],
        [f.id for f in failures],
        [f.token for f in failures],
        [f.state.value for f in failures],
        [f.delay_ms for f in failures],
        [f.error for f in failures],
        [f.spent for f in failures],
    )
    return {row["id"] for row in rows}


# --- leases ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Lease:
    id: int
    lease_token: uuid.UUID


async def extend_leases(db: Executor, leases: Sequence[Lease], *, lease_ms: int) -> dict[uuid.UUID, bool]:
    """Extend the leases still held by `lease_ms`; returns each one still held (by token) with
    whether a cancel was requested. A lease missing is lost."""
    rows = await db.fetch(
        Q["job_heartbeat_many"],
        [lease.id for lease in leases],
        [lease.lease_token for lease in leases],
        lease_ms,
    )
    return {row["lease_token"]: row["cancel_requested"] for row in rows}


@dataclass(frozen=True, slots=True)
class Released:
    released: set[int]
    # Still held under their tokens but locked by another transaction: worth another try.
    locked: set[int]


async def release_many(db: Executor, leases: Sequence[Lease]) -> Released:
    """Give jobs back (available, the attempt not spent), skipping rows another transaction holds."""
    rows = await db.fetch(
        Q["job_release_many"], [lease.id for lease in leases], [lease.lease_token for lease in leases]
    )
    return Released({r["id"] for r in rows if r["released"]}, {r["id"] for r in rows if not r["released"]})


# --- maintenance -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RescuedJob:
    id: int
    queue: str
    kind: str
    # `available` again, or `dead` (stalled too often), or `cancelled` (a cancel was requested).
    state: JobState
    attempt: int
    last_error: JsonObject | None

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> RescuedJob:
        return cls(
            row["id"], row["queue"], row["kind"], JobState(row["state"]), row["attempt"], row["last_error"]
        )


async def rescue_expired(
    db: Executor, *, now: datetime | None, max_stalled: int, batch_max: int
) -> list[RescuedJob]:
    """One batch of the rescuer (at most `batch_max` jobs whose lease expired before `now`)."""
    rows = await db.fetch(Q["job_rescue_expired"], now, max_stalled, batch_max)
    return [RescuedJob.from_row(row) for row in rows]


@dataclass(frozen=True, slots=True)
class FinishedQueue:
    """A queue that holds finished jobs: how many of them completed, and when the oldest did."""

    name: str
    completed: int
    completed_oldest: datetime | None


async def finished_queues(db: Executor) -> list[FinishedQueue]:
    """The queues that hold finished jobs."""
    rows = await db.fetch(Q["job_finished_queues"])
    return [FinishedQueue(row["queue"], row["completed"], row["completed_oldest"]) for row in rows]


async def completed_kept_oldest(db: Executor, *, queue: str, keep: int) -> tuple[datetime, int] | None:
    """The (finish time, id) of the oldest of the newest `keep` (>= 1) completed jobs of `queue`;
    None when the queue holds fewer."""
    rows = await db.fetch(Q["job_completed_kept_oldest"], queue, keep)
    return (rows[0]["finalized_at"], rows[0]["id"]) if rows else None


async def prune_completed(
    db: Executor,
    *,
    queue: str,
    after_id: int,
    before: tuple[datetime, int] | None,
    batch_max: int,
) -> tuple[int, int, int | None]:
    """Delete up to `batch_max` completed jobs of `queue` with an id above `after_id` that finished
    before `before` (finish time, id), or all of them when it is None. Returns (deleted, picked,
    the last id picked): the next batch goes on after that id."""
    stamp, last = before if before is not None else (None, None)
    (row,) = await db.fetch(Q["job_prune_completed"], queue, after_id, stamp, last, batch_max)
    return int(row["deleted"]), int(row["picked"]), row["last_id"]


async def prune_older(
    db: Executor, *, queue: str, states: Sequence[JobState], finished_before: datetime, batch_max: int
) -> int:
    """Delete up to `batch_max` dead or cancelled jobs of `queue` in `states` finished before
    `finished_before`."""
    rows = await db.fetch(Q["job_prune_older"], queue, [s.value for s in states], finished_before, batch_max)
    return int(rows[0][0])


async def prune_beyond_count(
    db: Executor, *, queue: str, states: Sequence[JobState], keep: int, batch_max: int
) -> int:
    """Delete up to `batch_max` dead or cancelled jobs of `queue` in `states` beyond the newest
    `keep`."""
    rows = await db.fetch(Q["job_prune_beyond_count"], queue, [s.value for s in states], keep, batch_max)
    return int(rows[0][0])


async def vacuum(db: Executor) -> None:
    await db.fetch(Q["job_vacuum"])


# --- queue limits ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueueLimitsRow:
    queue: str
    rate_max: int | None
    rate_window_ms: int | None
    concurrency_max: int | None
    # How long a pause asked by a handler still runs (None: none runs).
    paused_ms: int | None


async def queue_limits(db: Executor, queues: Sequence[str]) -> list[QueueLimitsRow]:
    """The limits of those of `queues` that have any (a rate, a global concurrency, a pause)."""
    rows = await db.fetch(Q["job_queue_limits"], list(queues))
    return [
        QueueLimitsRow(r["name"], r["rate_max"], r["rate_window_ms"], r["concurrency_max"], r["paused_ms"])
        for r in rows
    ]


async def pause_queue_for(db: Executor, *, queue: str, pause_ms: int) -> int:
    """No job of `queue` starts for `pause_ms` (a longer pause is kept); returns the pause left."""
    rows = await db.fetch(Q["job_queue_pause_for"], queue, pause_ms)
    return int(rows[0]["paused_ms"])


async def wake_queues(db: Executor, queues: Sequence[str]) -> None:
    """NOTIFY the workers of `queues` that they may have work."""
    await db.fetch(Q["job_queue_wake"], list(queues))


async def set_rate_limit(db: Executor, *, queue: str, max_jobs: int | None, window_ms: int | None) -> None:
    await db.fetch(Q["job_queue_set_rate_limit"], queue, max_jobs, window_ms)


async def set_global_concurrency(db: Executor, *, queue: str, limit: int | None) -> None:
    await db.fetch(Q["job_queue_set_concurrency"], queue, limit)


async def set_waiting_events(db: Executor, *, queue: str, enabled: bool) -> None:
    await db.fetch(Q["job_queue_set_waiting_events"], queue, enabled)


# --- leadership and sessions ---------------------------------------------------------------------------


async def leader_try_lock(db: Executor, *, key: int) -> bool:
    """Take the maintenance leader's session advisory lock `key` if it is free."""
    rows = await db.fetch(Q["job_leader_try_lock"], key)
    return bool(rows[0][0])


async def ping(db: Executor) -> None:
    """A round trip that proves the connection alive."""
    await db.fetch(Q["job_listener_ping"])


# --- administration ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobFilter:
    """Which jobs a listing or a replay takes: every field that is not None must match."""

    state: JobState | None = None
    queue: str | None = None
    kind: str | None = None
    # A substring of the last error (replays).
    error_contains: str | None = None
    # A window on finalized_at (replays).
    since: datetime | None = None
    until: datetime | None = None
    # Jobs whose payload contains this object (`{"intent_id": "..."}`; listings).
    payload_contains: JsonObject | None = None


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _shown(row: asyncpg.Record) -> JsonObject:
    """A job as listings show it: a LIFO job's run_at is stored mirrored about the Unix epoch (the
    claims' order serves it so; docs/state_machines.md, "LIFO"), and shown as the time it was due."""
    shown = dict(row)
    run_at = shown.get("run_at")
    if isinstance(run_at, datetime) and run_at < _EPOCH:
        shown["run_at"] = _EPOCH + (_EPOCH - run_at)
    return shown


async def list_jobs(db: Executor, *, where: JobFilter, before_id: int | None, limit: int) -> list[JsonObject]:
    """Jobs newest first (the listing's columns), paginated by id."""
    state = where.state.value if where.state is not None else None
    rows = await db.fetch(
        Q["job_list"], state, where.queue, where.kind, before_id, limit, where.payload_contains
    )
    return [_shown(row) for row in rows]


async def get_job(db: Executor, *, job_id: int) -> JsonObject | None:
    """Every column of a job (a LIFO job's run_at as the time it was due)."""
    rows = await db.fetch(Q["job_get"], job_id)
    return _shown(rows[0]) if rows else None


async def retry_job(db: Executor, *, job_id: int) -> bool:
    """Make a dead, cancelled, retryable or scheduled job available now; False if it is not one."""
    return bool(await db.fetch(Q["job_retry"], job_id))


async def replay_dead(db: Executor, *, where: JobFilter, limit: int) -> list[int]:
    """Replay up to `limit` dead jobs matching `where` (its state is ignored); returns their ids."""
    rows = await db.fetch(
        Q["job_replay_dead"], where.kind, where.queue, where.error_contains, where.since, where.until, limit
    )
    return [int(row["id"]) for row in rows]


async def cancel_job(db: Executor, *, job_id: int) -> JobState | None:
    """Cancel a job not started, or ask a running one to stop; returns its state after (`running`
    for a request), None when it is finished or missing."""
    rows = await db.fetch(Q["job_cancel"], job_id)
    return JobState(rows[0]["state"]) if rows else None


async def set_paused(db: Executor, *, queue: str, paused: bool) -> None:
    await db.fetch(Q["job_queue_set_paused"], queue, paused)


async def set_max_depth(db: Executor, *, queue: str, max_depth: int | None) -> None:
    await db.fetch(Q["job_queue_set_max_depth"], queue, max_depth)


@dataclass(frozen=True, slots=True)
class QueueSettings:
    name: str
    paused: bool
    max_depth: int | None
    rate_max: int | None
    rate_window_ms: int | None
    concurrency_max: int | None
    # A `waiting` event per job that becomes available (migration 0112).
    waiting_events: bool
    # Set while a pause asked by a handler (RateLimitedError) runs.
    rate_paused_until: datetime | None

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> QueueSettings:
        return cls(
            name=row["name"],
            paused=row["paused"],
            max_depth=row["max_depth"],
            rate_max=row["rate_max"],
            rate_window_ms=row["rate_window_ms"],
            concurrency_max=row["concurrency_max"],
            waiting_events=row["waiting_events"],
            rate_paused_until=row["rate_paused_until"],
        )


async def list_queues(db: Executor) -> list[QueueSettings]:
    """Every queue with settings, by name."""
    rows = await db.fetch(Q["job_queue_list"])
    return [QueueSettings.from_row(row) for row in rows]


async def count_by_queue_and_state(db: Executor) -> dict[str, dict[str, int]]:
    """Job counts per queue and state."""
    result: dict[str, dict[str, int]] = {}
    for row in await db.fetch(Q["job_stats"]):
        result.setdefault(row["queue"], {})[row["state"]] = int(row["n"])
    return result


async def oldest_available_age(db: Executor) -> dict[str, float]:
    """Seconds since the oldest available job of each queue with any was due."""
    return {row["queue"]: float(row["age_s"]) for row in await db.fetch(Q["job_oldest_available"])}


# --- a handler's own statements ----------------------------------------------------------------------


async def set_progress(db: Executor, *, job_id: int, lease_token: uuid.UUID, pct: float) -> bool:
    """Record progress on a job still held under `lease_token`; False when the lease is lost."""
    return bool(await db.fetch(Q["job_progress_set"], job_id, lease_token, pct))


async def complete_fenced(db: Executor, *, job_id: int, lease_token: uuid.UUID, result: object) -> bool:
    """Complete a job inside the caller's transaction if `lease_token` still holds it."""
    return bool(await db.fetch(Q["job_complete_fenced"], job_id, lease_token, result))


async def lease_held(db: Executor, *, job_id: int, lease_token: uuid.UUID) -> bool:
    """Whether `lease_token` still holds the job (no lock taken)."""
    return bool(await db.fetch(Q["job_lease_check"], job_id, lease_token))


async def hold_leases(db: Executor, leases: Sequence[Lease]) -> set[tuple[int, uuid.UUID]]:
    """Lock, in id order, the jobs still held under their lease tokens; returns those held."""
    ids, tokens = [lease.id for lease in leases], [lease.lease_token for lease in leases]
    rows = await db.fetch(Q["job_hold_leases_many"], ids, tokens)
    return {(row["id"], row["lease_token"]) for row in rows}


async def children_results(db: Executor, *, parent_id: int) -> dict[int, object]:
    """A flow parent's children's results, by child id."""
    rows = await db.fetch(Q["job_children_results"], parent_id)
    return {int(row["id"]): row["result"] for row in rows}


async def children_failures(db: Executor, *, parent_id: int) -> list[JsonObject]:
    """A flow parent's dead and cancelled children (id, kind, state, last_error)."""
    rows = await db.fetch(Q["job_children_failures"], parent_id)
    return [dict(row) for row in rows]


async def append_log(db: Executor, *, job_id: int, lease_token: uuid.UUID, line: str, keep: int) -> bool:
    """Append a log line to a job still held under `lease_token` (the newest `keep` stay)."""
    return bool(await db.fetch(Q["job_log_append"], job_id, lease_token, line, keep))


@dataclass(frozen=True, slots=True)
class Outcome:
    state: JobState
    result: object
    last_error: JsonObject | None


async def outcome(db: Executor, *, job_id: int) -> Outcome | None:
    """A job's state, result and last error; None when it does not exist."""
    rows = await db.fetch(Q["job_outcome"], job_id)
    if not rows:
        return None
    return Outcome(JobState(rows[0]["state"]), rows[0]["result"], rows[0]["last_error"])


async def change_job(
    db: Executor, *, job_id: int, payload: JsonObject | None, priority: int | None, delay_ms: int | None
) -> JobState | None:
    """Change a job that has not started; its state after, or None when it has started or is gone."""
    rows = await db.fetch(Q["job_change"], job_id, payload, priority, delay_ms)
    return JobState(rows[0]["state"]) if rows else None


async def promote_job(db: Executor, *, job_id: int) -> bool:
    """Make a scheduled or retryable job available now; False if it is not one."""
    return bool(await db.fetch(Q["job_promote"], job_id))


async def cancel_children_in_queue(db: Executor, *, queue: str, states: Sequence[JobState]) -> list[int]:
    """Cancel the flow children of `queue` in `states` (before they are removed); their ids."""
    rows = await db.fetch(Q["job_cancel_children_in_queue"], queue, [s.value for s in states])
    return [int(row["id"]) for row in rows]


async def delete_in_queue(
    db: Executor, *, queue: str, states: Sequence[JobState], ids: Sequence[int], batch_max: int
) -> int:
    rows = await db.fetch(Q["job_delete_in_queue"], queue, [s.value for s in states], list(ids), batch_max)
    return int(rows[0][0])


async def delete_queue_settings(db: Executor, *, queue: str) -> None:
    await db.fetch(Q["job_queue_delete"], queue)


async def count_running_in_queue(db: Executor, *, queue: str) -> int:
    rows = await db.fetch(Q["job_count_running_in_queue"], queue)
    return int(rows[0][0])


@dataclass(frozen=True, slots=True)
class RemovedJob:
    id: int
    kind: str
    queue: str


async def remove_job(db: Executor, *, job_id: int) -> RemovedJob | None:
    """Remove a job that is not running (a flow child is cancelled first); None otherwise."""
    await db.fetch(Q["job_cancel_one_child"], job_id)
    rows = await db.fetch(Q["job_remove"], job_id)
    return RemovedJob(rows[0]["id"], rows[0]["kind"], rows[0]["queue"]) if rows else None


async def decodes_json(db: Executor) -> bool:
    """Whether `db`'s connections decode jsonb to Python objects (the engine's codecs are set)."""
    rows = await db.fetch(Q["job_codec_check"])
    return isinstance(rows[0]["value"], dict)


async def publish_events(db: Executor, *, channel: str, message: str) -> None:
    await db.fetch(Q["job_events_publish"], channel, message)


# --- enqueueing --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InsertParams:
    """One job to insert (job_insert): its fields as validated by enqueue."""

    queue: str
    kind: str
    payload: JsonObject
    priority: int
    run_at: datetime | None
    delay_ms: int | None
    max_attempts: int | None
    backoff: JsonObject | None
    unique_key: str | None
    timeout_ms: int | None
    parent_id: int | None
    # None: `scheduled` or `available` by run_at; a flow's parent passes `waiting_children`.
    state: JobState | None
    pending_children: int
    on_child_dead: str
    # Runs before the waiting jobs of its priority, the newest first.
    lifo: bool = False
    # What this job's death does to its parent (None: the parent's on_child_dead).
    parent_policy: str | None = None
    # False: no NOTIFY in the caller's transaction; the caller wakes the queue after its commit.
    notify: bool = True


async def insert(db: Executor, params: InsertParams) -> int | None:
    """Insert one job; None when its unique key is held or its queue is full."""
    p = params
    rows = await db.fetch(
        Q["job_insert"], p.queue, p.kind, p.payload, p.priority, p.run_at, p.delay_ms, p.max_attempts,
        p.backoff, p.unique_key, p.timeout_ms, p.parent_id, p.state.value if p.state is not None else None,
        p.pending_children, p.on_child_dead, p.lifo, p.parent_policy, p.notify,
    )  # fmt: skip
    return int(rows[0]["id"]) if rows else None


# --- deduplication -----------------------------------------------------------------------------------


async def dedup_take(db: Executor, *, key: str, ttl_ms: int, debounce: bool) -> bool:
    """Take deduplication `key` for `ttl_ms` unless it is held; True when taken."""
    return bool(await db.fetch(Q["job_dedup_take"], key, ttl_ms, debounce))


async def dedup_set_job(db: Executor, *, key: str, job_id: int) -> None:
    await db.fetch(Q["job_dedup_set_job"], key, job_id)


async def dedup_holder(db: Executor, *, key: str) -> int | None:
    """The job that holds `key` (None: no row, or its job is not written yet)."""
    rows = await db.fetch(Q["job_dedup_holder"], key)
    return int(rows[0]["job_id"]) if rows and rows[0]["job_id"] is not None else None


@dataclass(frozen=True, slots=True)
class Replacement:
    """What a debounce gives the waiting job: the newest payload, priority and run time."""

    payload: JsonObject
    priority: int
    run_at: datetime | None
    delay_ms: int | None
    lifo: bool


async def dedup_replace(db: Executor, *, key: str, ttl_ms: int, new: Replacement) -> int | None:
    """Debounce: the waiting job holding `key` takes `new`; its id, or None when it has started."""
    rows = await db.fetch(
        Q["job_dedup_replace"], key, new.payload, new.run_at, ttl_ms, new.delay_ms, new.priority, new.lifo
    )
    return int(rows[0]["id"]) if rows else None


async def dedup_prune(db: Executor, *, batch_max: int) -> int:
    """Delete up to `batch_max` expired deduplication keys; returns how many."""
    return len(await db.fetch(Q["job_dedup_prune"], batch_max))


async def find_unfinished_by_key(db: Executor, *, unique_key: str) -> int | None:
    rows = await db.fetch(Q["job_find_unfinished_by_key"], unique_key)
    return int(rows[0]["id"]) if rows else None


async def queue_is_full(db: Executor, *, queue: str) -> bool:
    rows = await db.fetch(Q["job_queue_is_full"], queue)
    return bool(rows[0][0])


@dataclass(frozen=True, slots=True)
class InsertManyParams:
    """Many jobs to insert (job_insert_many), one list per column, in the jobs' order; `payloads`
    is their JSON array as text, and a column NULL for every job may be None."""

    queues: Sequence[str]
    kinds: Sequence[str]
    payloads: str
    priorities: Sequence[int]
    run_ats: Sequence[datetime | None] | None
    max_attempts: Sequence[int | None] | None
    backoffs: Sequence[JsonObject | None] | None
    timeouts_ms: Sequence[int | None] | None


async def insert_many(db: Executor, params: InsertManyParams) -> list[int]:
    """Insert many jobs in one statement; returns their ids in input order."""
    p = params
    rows = await db.fetch(
        Q["job_insert_many"], p.queues, p.kinds, p.payloads, p.priorities, p.run_ats, p.max_attempts,
        p.backoffs, p.timeouts_ms,
    )  # fmt: skip
    return [int(row["id"]) for row in rows]


# --- periodic jobs -----------------------------------------------------------------------------------


async def periodic_init(db: Executor, *, name: str, slot: datetime) -> bool:
    """Record a schedule's first slot without enqueueing; False when the schedule is known."""
    return bool(await db.fetch(Q["job_periodic_init"], name, slot))


async def periodic_claim_slot(db: Executor, *, name: str, slot: datetime) -> bool:
    """Claim schedule `name`'s `slot`; False when another process enqueued it already."""
    return bool(await db.fetch(Q["job_periodic_claim_slot"], name, slot))


# --- claim sessions ----------------------------------------------------------------------------------


async def start_claim_session(db: Executor, *, lock_timeout_ms: int | None) -> None:
    """Plan once, generically and by index only, and wait at most `lock_timeout_ms` on a lock
    (jobs.sql, job_session_generic_plans, says why)."""
    await db.fetch(Q["job_session_generic_plans"])
    if lock_timeout_ms is not None:
        await db.fetch(Q["job_session_lock_timeout"], lock_timeout_ms)


async def end_claim_session(db: Executor) -> None:
    """Undo start_claim_session before the connection goes back to its pool."""
    await db.fetch(Q["job_session_default_plans"])
