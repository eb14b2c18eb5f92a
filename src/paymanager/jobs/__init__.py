"""paymanager's durable job engine on PostgreSQL: a library that knows nothing about payments.

Enqueue on the caller's connection (`enqueue`, `enqueue_many`, `enqueue_flow`), register handlers
(`Registry`), run them (`Worker`), keep the cluster healthy (`Maintenance`), administer (`admin`), and
follow the lifecycle (`EventStream`). `migrate(conn)` installs the engine's tables alone. The
lifecycle is drawn in docs/state_machines.md.
"""

from paymanager.jobs._queries import CHANNEL_AVAILABLE as JOB_AVAILABLE_CHANNEL
from paymanager.jobs.admin import set_global_concurrency, set_rate_limit, set_waiting_events
from paymanager.jobs.backoff import OUTBOX_SCHEDULE, Backoff, Exponential, Fixed, Schedule
from paymanager.jobs.context import JobContext
from paymanager.jobs.engine import JobEngine
from paymanager.jobs.enqueue import (
    Dedup,
    EnqueueResult,
    Flow,
    NewJob,
    enqueue,
    enqueue_flow,
    enqueue_many,
)
from paymanager.jobs.errors import (
    CodecError,
    EnqueueError,
    InvalidJobError,
    JobCancelledError,
    JobError,
    LeaseLostError,
    PayloadTooLargeError,
    PermanentError,
    QueueFullError,
    RateLimitedError,
)
from paymanager.jobs.events import (
    DeadHook,
    DeadJob,
    ErrorHook,
    EventStream,
    FinishedJob,
    JobEvent,
    wait_until_finished,
)
from paymanager.jobs.options import MaintenanceOptions, PeriodicJob, Retention, WorkerOptions
from paymanager.jobs.registry import Registry
from paymanager.jobs.schema import migrate
from paymanager.jobs.states import JobState
from paymanager.jobs.worker import Worker

__all__ = [
    "JOB_AVAILABLE_CHANNEL",
    "OUTBOX_SCHEDULE",
    "Backoff",
    "CodecError",
    "DeadHook",
    "DeadJob",
    "Dedup",
    "EnqueueError",
    "EnqueueResult",
    "ErrorHook",
    "EventStream",
    "Exponential",
    "FinishedJob",
    "Fixed",
    "Flow",
    "InvalidJobError",
    "JobCancelledError",
    "JobContext",
    "JobEngine",
    "JobError",
    "JobEvent",
    "JobState",
    "LeaseLostError",
    "MaintenanceOptions",
    "NewJob",
    "PayloadTooLargeError",
    "PeriodicJob",
    "PermanentError",
    "QueueFullError",
    "RateLimitedError",
    "Registry",
    "Retention",
    "Schedule",
    "Worker",
    "WorkerOptions",
    "enqueue",
    "enqueue_flow",
    "enqueue_many",
    "migrate",
    "set_global_concurrency",
    "set_rate_limit",
    "set_waiting_events",
    "wait_until_finished",
]
