"""Settings of the worker and the maintenance service: frozen, bounded, validated on construction.

The runtime builds them from config.py; the library has no defaults of its own elsewhere. Every
bound is a named constant (River's way) so a message can say what is allowed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from paymanager.jobs.backoff import DEFAULT_BACKOFF, Exponential, Fixed, Schedule

LEASE_MS_MIN = 200
LEASE_MS_MAX = 3_600_000
CLAIM_BATCH_MAX = 1_000
CONCURRENCY_MAX = 10_000
ATTEMPTS_MAX = 1_000
PAYLOAD_BYTES_MAX = 16 * 1024 * 1024
RESCUE_BATCH_MAX = 10_000
PRUNE_BATCH_MAX = 100_000
# Queue limits (the job_queue table's CHECK constraints say the same, migration 0110).
RATE_MAX_MAX = 1_000_000
RATE_WINDOW_MS_MAX = 86_400_000
GLOBAL_CONCURRENCY_MAX = 100_000
# Job kinds and queue names (the database's domains job_kind_name and job_queue_name say the same).
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
QUEUE_PATTERN = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


def _within(name: str, value: float, low: float, high: float) -> None:
    if not low <= value <= high:
        raise ValueError(f"{name} must be within [{low}, {high}], got {value}")


@dataclass(frozen=True, slots=True)
class WorkerOptions:
    """How a worker claims, leases, heartbeats and completes jobs."""

    # Identity in leases (`lease_owner`); the runtime passes its process id.
    owner: str = "worker"
    lease_ms: int = 30_000
    heartbeat_interval_ms: int = 10_000
    # Polling fallback: LISTEN/NOTIFY wakes the worker sooner; this covers lost notifications.
    poll_interval_ms: int = 1_000
    # Most jobs claimed by one statement (over all queues).
    claim_batch_max: int = 500
    # Claims in flight at once, each on its own pooled connection (held for the worker's life).
    claim_pipeline: int = 2
    # Most completions written by one statement; more wait for the next flush.
    complete_batch_max: int = 1_000
    default_max_attempts: int = 25
    default_backoff: Schedule | Exponential | Fixed = DEFAULT_BACKOFF
    # A handler running longer than this (unless its kind or job says otherwise) fails with a timeout.
    default_timeout_ms: int = 3_600_000
    # Threads for synchronous handlers.
    sync_threads: int = 8
    # How often the LISTEN connection is checked (a half-open TCP connection says nothing).
    listener_check_interval_ms: int = 5_000
    # Due scheduled/retryable jobs promoted per poll, at most.
    promote_batch_max: int = 1_000
    redis_url: str | None = None
    # `completed` events cost a NOTIFY per 25 jobs; a deployment with no subscriber may turn them off.
    notify_completed_events: bool = True
    # `active` events (a job started): one publish per claim, off the claim's path; off by default
    # because a NOTIFY per claim is a cost a deployment without a subscriber need not pay.
    active_events: bool = False
    # The least time between the starts of two claims (River's FetchCooldown). A claim that comes
    # sooner waits for the rest of it, so the jobs that arrive meanwhile share one claim: bigger
    # batches and fewer transactions under a steady trickle, for at most this much added latency.
    # The first claim after a quiet spell starts at once, and so does a claim after one that filled
    # its slots (a backlog drains at full speed). 0: every notification claims at once.
    claim_cooldown_ms: int = 0
    # A claim that completes nothing commits without waiting for its WAL flush (the flush is a large
    # part of an idle worker's enqueue-to-start latency); see docs/ARCHITECTURE.md, "Claims commit
    # quickly".
    quick_claim_commit: bool = True
    # The longest a claim waits on a lock (PostgreSQL's lock_timeout on the claim sessions). Claims
    # skip locked jobs; they wait behind DDL (a migration's ALTER TABLE or LOCK), and for a moment
    # when a job they complete is locked by another worker's claim in flight, or for this long when
    # two claims deadlock so (jobs.sql, job_claim_batch): past this the claim fails and is retried,
    # so neither a graceful stop nor the LISTEN connection (whose notifications wait behind a
    # statement running on it) stays stuck.
    claim_lock_timeout_ms: int = 1_000
    # Completed jobs are deleted as they complete instead of kept as `completed` rows for retention
    # to prune (BullMQ's removeOnComplete: true): no result is kept, and `wait_until_finished` and
    # `jobs show` find no such job; each completion writes no new row version and leaves nothing to prune.
    # Only the worker's own completions of jobs without a parent: a flow's child, and a job completed
    # in a handler's own transaction (complete_in), stay `completed` rows for retention.
    delete_completed: bool = False
    # The process's young-generation collection threshold, raised to this at the worker's start (a
    # process-wide setting; None leaves it as it is). Every claimed job makes several short-lived
    # container objects, so CPython's default (700) collects every few dozen jobs; a collection
    # traverses only the objects still alive, so collecting less often makes each one no dearer.
    gc_young_threshold: int | None = 5_000

    def __post_init__(self) -> None:
        if not self.owner or len(self.owner) > 200:
            raise ValueError("owner must be 1 to 200 characters")
        _within("lease_ms", self.lease_ms, LEASE_MS_MIN, LEASE_MS_MAX)
        _within("heartbeat_interval_ms", self.heartbeat_interval_ms, 50, LEASE_MS_MAX)
        if self.heartbeat_interval_ms * 2 > self.lease_ms:
            raise ValueError(
                f"heartbeat_interval_ms ({self.heartbeat_interval_ms}) must be at most half of lease_ms "
                f"({self.lease_ms}), or one late heartbeat loses the lease"
            )
        _within("poll_interval_ms", self.poll_interval_ms, 10, 3_600_000)
        _within("claim_batch_max", self.claim_batch_max, 1, CLAIM_BATCH_MAX)
        _within("complete_batch_max", self.complete_batch_max, 1, 10_000)
        _within("claim_pipeline", self.claim_pipeline, 1, 8)
        _within("claim_cooldown_ms", self.claim_cooldown_ms, 0, 10_000)
        if self.gc_young_threshold is not None:
            _within("gc_young_threshold", self.gc_young_threshold, 100, 1_000_000)
        _within("default_max_attempts", self.default_max_attempts, 1, ATTEMPTS_MAX)
        _within("default_timeout_ms", self.default_timeout_ms, 1, 86_400_000)
        _within("sync_threads", self.sync_threads, 1, 256)
        _within("listener_check_interval_ms", self.listener_check_interval_ms, 50, 600_000)
        _within("promote_batch_max", self.promote_batch_max, 1, 100_000)
        _within("claim_lock_timeout_ms", self.claim_lock_timeout_ms, 1, 600_000)


@dataclass(frozen=True, slots=True)
class Retention:
    """How long finished jobs of a queue stay (BullMQ's removeOnComplete / removeOnFail).

    Ages are in ms; counts are the most kept per queue; None means no limit of that kind.
    Cancelled jobs follow the dead jobs' rules.
    """

    completed_age_ms: int | None = 24 * 3_600_000
    completed_count: int | None = 5_000
    dead_age_ms: int | None = 7 * 24 * 3_600_000
    dead_count: int | None = None

    def __post_init__(self) -> None:
        for name in ("completed_age_ms", "completed_count", "dead_age_ms", "dead_count"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"retention {name} must be >= 0, got {value}")


@dataclass(frozen=True, slots=True)
class PeriodicJob:
    """A job enqueued once per slot cluster-wide: every `interval_ms`, or on a cron expression."""

    name: str
    kind: str
    queue: str = "default"
    payload: dict[str, object] = field(default_factory=dict)
    interval_ms: int | None = None
    cron: str | None = None

    def __post_init__(self) -> None:
        # The names' rules, checked here so a bad schedule stops start-up instead of failing each tick.
        if not NAME_PATTERN.match(self.kind) or not QUEUE_PATTERN.match(self.queue):
            raise ValueError(f"periodic job {self.name!r}: kind and queue must be job and queue names")
        if (self.interval_ms is None) == (self.cron is None):
            raise ValueError(f"periodic job {self.name!r} needs exactly one of interval_ms and cron")
        if self.interval_ms is not None:
            _within("interval_ms", self.interval_ms, 1_000, 366 * 86_400_000)
        if self.cron is not None:
            from croniter import croniter

            if not croniter.is_valid(self.cron):
                raise ValueError(f"periodic job {self.name!r}: invalid cron expression {self.cron!r}")


@dataclass(frozen=True, slots=True)
class MaintenanceOptions:
    """The leader's duties: rescuing expired leases, pruning, promoting due jobs, periodic jobs."""

    rescue_interval_ms: int = 5_000
    rescue_batch_max: int = 1_000
    # A job whose lease expired this many times already is dead at the next expiry.
    max_stalled: int = 2
    prune_interval_ms: int = 60_000
    prune_batch_max: int = 10_000
    retention: Retention = field(default_factory=Retention)
    retention_by_queue: dict[str, Retention] = field(default_factory=dict)
    periodic: tuple[PeriodicJob, ...] = ()
    periodic_interval_ms: int = 1_000
    promote_interval_ms: int = 1_000
    promote_batch_max: int = 10_000
    # How often a follower tries to become the leader.
    election_interval_ms: int = 2_000
    # How often the leader vacuums the jobs table; None leaves it to autovacuum alone.
    vacuum_interval_ms: int | None = 30_000

    def __post_init__(self) -> None:
        _within("rescue_interval_ms", self.rescue_interval_ms, 10, 3_600_000)
        _within("rescue_batch_max", self.rescue_batch_max, 1, RESCUE_BATCH_MAX)
        _within("max_stalled", self.max_stalled, 0, 100)
        _within("prune_interval_ms", self.prune_interval_ms, 10, 86_400_000)
        _within("prune_batch_max", self.prune_batch_max, 1, PRUNE_BATCH_MAX)
        _within("periodic_interval_ms", self.periodic_interval_ms, 10, 3_600_000)
        _within("promote_interval_ms", self.promote_interval_ms, 10, 3_600_000)
        _within("promote_batch_max", self.promote_batch_max, 1, 100_000)
        _within("election_interval_ms", self.election_interval_ms, 10, 600_000)
        if self.vacuum_interval_ms is not None:
            _within("vacuum_interval_ms", self.vacuum_interval_ms, 1_000, 86_400_000)
        names = [p.name for p in self.periodic]
        if len(names) != len(set(names)):
            raise ValueError(f"periodic job names must be unique: {names}")

    def retention_for(self, queue: str) -> Retention:
        return self.retention_by_queue.get(queue, self.retention)
