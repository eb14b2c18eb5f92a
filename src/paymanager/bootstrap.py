"""The composition root: `build(settings, database)` wires the components this build ships.

It runs the start-up steps between the database and the workers, in the order of DESIGN §3:

    connect the ledger -> seed and verify system accounts -> register channels ->
    reconcile stuck intents -> register PSP drivers -> (the services of each role, built, not started)

and returns them as one typed `Components`. This is the one module that picks concrete adapters (the
PostgreSQL ledger, Redis, the secret box); the runtime starts what it returns, the API is created from
it (`create_app(components)`), and tests build it the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import asyncpg
import redis.asyncio as aioredis

from paymanager.adapters.redis_events import RedisPublisher
from paymanager.adapters.secret_box import SecretBox
from paymanager.application.accounts.use_cases import seed_system_accounts
from paymanager.application.admin.gauges import register_gauges
from paymanager.application.context import Payments
from paymanager.application.intents.backpressure import apply_default_max_depth
from paymanager.application.intents.confirm import OUTBOX_QUEUE, SETTLE_KIND
from paymanager.application.intents.event_hub import IntentEventHub
from paymanager.application.intents.events import EventPublisher, NoPublisher
from paymanager.application.intents.invoice_sweep import INVOICE_QUEUE, SWEEP_KIND, invoice_sweep_handler
from paymanager.application.intents.reconcile import reconcile
from paymanager.application.intents.settle import settle_handler
from paymanager.application.ledger_ops import EXPIRE_KIND, expire_pending_handler
from paymanager.application.sweeper import ApiSweeper
from paymanager.config import Settings
from paymanager.db.database import Database
from paymanager.domain.channels import DEFAULT_CHANNELS, ChannelRegistry
from paymanager.jobs import (
    OUTBOX_SCHEDULE,
    DeadJob,
    MaintenanceOptions,
    PeriodicJob,
    Registry,
    Retention,
    Worker,
    WorkerOptions,
)
from paymanager.jobs.maintenance import Maintenance
from paymanager.ledger import LedgerUnavailableError, PostgresLedger
from paymanager.logging import get_logger
from paymanager.metrics import QUERY_GAUGES
from paymanager.roles import Role

log = get_logger("paymanager.bootstrap")

T = TypeVar("T")


class Service(Protocol):
    """Something a role runs in the background: a worker, a sweep, the heartbeat.

    A service that takes new work (the job worker) may also have `stop_taking_work()`, called for
    every service at the very start of a shutdown, before any `stop`."""

    name: str

    async def start(self) -> None: ...

    async def stop(self, timeout_s: float) -> None: ...


class StartupError(RuntimeError):
    """A start-up step failed; the process logs it and exits 1."""

    def __init__(self, step: str, cause: BaseException) -> None:
        self.step = step
        super().__init__(f"start-up step '{step}' failed: {cause}")


@dataclass(frozen=True)
class Components:
    """One process's components, built and ready to start."""

    settings: Settings
    database: Database
    process_id: str
    ledger: PostgresLedger
    redis: aioredis.Redis | None
    payments: Payments
    # The api role's NOTIFY hub of the SSE streams (None without the role).
    event_hub: IntentEventHub | None
    # The services of this process's roles, in start order (they stop in reverse).
    services: tuple[Service, ...]
    # Set when the process shuts down: long-lived work (event streams) ends itself.
    stopping: asyncio.Event = field(default_factory=asyncio.Event)

    async def close(self) -> None:
        """Close what `build` opened (Redis, the ledger's batches); the Database is the caller's."""
        await self.ledger.close()
        if self.redis is not None:
            with contextlib.suppress(Exception):
                await self.redis.aclose()


async def build(
    settings: Settings, database: Database, *, process_id: str, reconcile_intents: bool = True
) -> Components:
    """Run the start-up steps from the ledger to the role services (built, not started).

    Raises `StartupError` naming the step that failed. `reconcile_intents=False` skips the
    reconciler, for a caller that wants the components without touching any intent (tests)."""
    ledger = await _step("connect the ledger", connect_ledger(settings, database))
    redis = await _step("connect Redis", connect_redis(settings))
    payments = _payments(settings, database, ledger, redis, process_id)
    await _step("seed and verify system accounts", seed_system_accounts(payments))
    await _step("register channels", _register_channels(payments))
    await _step("limit the settlement queue", _limit_settlement_queue(database, settings))
    if reconcile_intents:
        await _step(
            "reconcile stuck intents",
            reconcile(
                payments, batch_size=settings.reconcile_batch_size, max_intents=settings.reconcile_max_intents
            ),
        )
    # Register PSP drivers: this build ships none yet; the step keeps its place in the order.
    hub = IntentEventHub(database) if Role.API in settings.worker_roles else None
    register_gauges(QUERY_GAUGES)
    services = _role_services(settings, database, payments, hub, process_id)
    return Components(settings, database, process_id, ledger, redis, payments, hub, services)


async def _step(name: str, work: Awaitable[T]) -> T:
    started = time.perf_counter()
    try:
        result = await work
    except Exception as exc:
        raise StartupError(name, exc) from exc
    log.debug("start-up step done", step=name, ms=round((time.perf_counter() - started) * 1000, 1))
    return result


async def connect_ledger(settings: Settings, database: Database) -> PostgresLedger:
    """The PostgreSQL ledger on the process pool, tried `LEDGER_CONNECT_ATTEMPTS` times, n x backoff apart.

    Payments hold, post and void inside the transaction that changes the intent (and completes the
    settlement job), which only the PostgreSQL ledger can join; so the TigerBeetle backend is refused
    here with that reason rather than run without the guarantee.
    """
    if settings.ledger_backend != "postgres":
        raise RuntimeError(
            "payments need LEDGER_BACKEND=postgres: holds commit in the intent's own transaction, which "
            "TigerBeetle cannot join (the TigerBeetle adapter serves `paymanager ledger` commands)"
        )
    ledger = PostgresLedger(database.pool)
    attempts = settings.ledger_connect_attempts
    for attempt in range(1, attempts + 1):
        try:
            await ledger.ping()
            return ledger
        except (OSError, asyncpg.PostgresError, LedgerUnavailableError) as exc:
            if attempt == attempts:
                raise
            log.warning("ledger not reachable", attempt=attempt, error=str(exc))
            await asyncio.sleep(settings.ledger_connect_backoff_ms * attempt / 1000)
    raise AssertionError("unreachable")


async def connect_redis(settings: Settings) -> aioredis.Redis | None:
    if settings.redis_url is None:
        return None
    client = aioredis.from_url(settings.redis_url.get_secret_value(), socket_connect_timeout=5)
    await client.ping()
    return client


def _payments(
    settings: Settings,
    database: Database,
    ledger: PostgresLedger,
    redis: aioredis.Redis | None,
    process_id: str,
) -> Payments:
    kek = settings.psp_config_kek.get_secret_value() if settings.psp_config_kek else None
    previous = (
        settings.psp_config_kek_previous.get_secret_value() if settings.psp_config_kek_previous else None
    )
    publisher: EventPublisher = RedisPublisher(redis) if redis is not None else NoPublisher()
    return Payments(
        pool=database.pool,
        ledger=ledger,
        channels=ChannelRegistry(),
        box=SecretBox.from_config(kek, previous),
        settings=settings,
        publisher=publisher,
        process_id=process_id,
    )


async def _limit_settlement_queue(database: Database, settings: Settings) -> None:
    async with database.pool.acquire() as conn:
        await apply_default_max_depth(conn, settings.outbox_max_depth)


async def _register_channels(payments: Payments) -> None:
    for channel in DEFAULT_CHANNELS:
        payments.channels.register(channel)
    log.info("channels registered", channels=payments.channels.names())


# Roles whose work runs as jobs. A process gets ONE job Worker serving the queues of all its roles, and
# one Maintenance (rescuer, pruner, periodic scheduler) whatever its roles.
JOB_ROLES = (Role.OUTBOX_WORKER, Role.INVOICE_EXPIRY)


def _role_services(
    settings: Settings, database: Database, payments: Payments, hub: IntentEventHub | None, process_id: str
) -> tuple[Service, ...]:
    services: list[Service] = []
    if hub is not None:
        services += [hub, ApiSweeper(payments)]
    if any(role in settings.worker_roles for role in JOB_ROLES):
        # Services stop in reverse order: the worker (stop claiming, finish or give back its jobs)
        # before the maintenance, whose duty in progress is not work that has to finish.
        services += [maintenance(settings, database), job_worker(settings, database, payments, process_id)]
    return tuple(services)


def job_worker(settings: Settings, database: Database, payments: Payments, process_id: str) -> Worker:
    """The job Worker for the queues of this process's job roles."""
    registry = Registry()
    queues: dict[str, int] = {}
    roles = settings.worker_roles
    if Role.OUTBOX_WORKER in roles:
        registry.register(
            SETTLE_KIND,
            settle_handler(payments),
            queue=OUTBOX_QUEUE,
            max_attempts=settings.outbox_max_attempts,
            backoff=OUTBOX_SCHEDULE,
        )
        registry.register(
            EXPIRE_KIND, expire_pending_handler(payments.ledger), queue=OUTBOX_QUEUE, max_attempts=3
        )
        queues[OUTBOX_QUEUE] = settings.outbox_concurrency
    if Role.INVOICE_EXPIRY in roles:
        # One sweep at a time per process; the periodic schedule makes it one per slot cluster-wide.
        registry.register(SWEEP_KIND, invoice_sweep_handler(payments), queue=INVOICE_QUEUE, max_attempts=3)
        queues[INVOICE_QUEUE] = 1
    options = worker_options(settings, process_id)
    return Worker(database.pool, database, registry, queues, options, on_dead=log_dead_job)


async def log_dead_job(job: DeadJob) -> None:
    """The engine's on-dead hook: one line at error level per dead job, for the alerting on logs."""
    error = (job.error or {}).get("error") if isinstance(job.error, dict) else None
    log.error(
        "job dead", job_id=job.id, kind=job.kind, queue=job.queue, attempts=job.attempt,
        last_error=str(error)[:500] if error is not None else None,
    )  # fmt: skip


def worker_options(settings: Settings, process_id: str) -> WorkerOptions:
    return WorkerOptions(
        owner=process_id,
        lease_ms=settings.job_lease_ms,
        heartbeat_interval_ms=settings.job_heartbeat_interval_ms,
        poll_interval_ms=settings.outbox_interval_ms,
        claim_batch_max=settings.outbox_batch_size,
        claim_cooldown_ms=settings.outbox_claim_cooldown_ms,
        quick_claim_commit=settings.job_quick_claim_commit,
        redis_url=settings.redis_url.get_secret_value() if settings.redis_url else None,
    )


def maintenance(settings: Settings, database: Database) -> Maintenance:
    """The engine's maintenance (rescuer, pruner, promoter); it elects one leader cluster-wide."""
    options = MaintenanceOptions(
        rescue_interval_ms=settings.job_rescue_interval_ms,
        max_stalled=settings.job_max_stalled,
        prune_interval_ms=settings.job_prune_interval_ms,
        retention=Retention(
            completed_age_ms=settings.job_retention_completed_age_ms,
            completed_count=settings.job_retention_completed_count,
            dead_age_ms=settings.job_retention_dead_age_ms,
        ),
        # Every process schedules every periodic job, whatever its roles: the leader's list must be the
        # cluster's. A run waits in its queue for a process with the role that serves it.
        periodic=(
            PeriodicJob(
                EXPIRE_KIND, EXPIRE_KIND, queue=OUTBOX_QUEUE, interval_ms=settings.ledger_expire_interval_ms
            ),
            PeriodicJob(
                SWEEP_KIND,
                SWEEP_KIND,
                queue=INVOICE_QUEUE,
                interval_ms=settings.invoice_expiry_sweep_interval_ms,
            ),
        ),
    )
    return Maintenance(database.pool, database, options, on_dead=log_dead_job)
