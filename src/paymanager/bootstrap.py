"""Wires the components this build ships into the runtime's start-up steps and roles.

Each component contributes named steps to `StartupHooks`; the runtime decides the order. Adding a
component means adding its `install_*` call here, nowhere else. This is the one module (with the
runtime) that picks concrete adapters: the PostgreSQL ledger, Redis, the secret box.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from paymanager.roles import Role
from paymanager.runtime import Service, StartupHooks

if TYPE_CHECKING:
    from paymanager.application.context import Payments
    from paymanager.runtime import Runtime

PAYMENTS = "payments"
OUTBOX_QUEUE = "outbox"
JOB_SERVICES = "job-services"
# Roles whose work runs as jobs. A process gets ONE job Worker serving the queues of all its roles, and
# one Maintenance (rescuer, pruner, periodic scheduler) whatever its roles.
JOB_ROLES = (Role.OUTBOX_WORKER, Role.INVOICE_EXPIRY)


def install(hooks: StartupHooks) -> None:
    """Register every component's start-up steps and role workers."""
    hooks.connect_ledger.append(connect_ledger)
    hooks.connect_ledger.append(connect_redis)
    hooks.seed_system_accounts.append(seed_system_accounts)
    hooks.register_channels.append(register_channels)
    hooks.reconcile_stuck_intents.append(reconcile_stuck_intents)
    hooks.role_workers.setdefault(Role.API, []).append(api_services)
    for role in JOB_ROLES:
        hooks.role_workers.setdefault(role, []).append(job_services)


async def connect_ledger(runtime: Runtime) -> None:
    """The PostgreSQL ledger on the process pool, tried `LEDGER_CONNECT_ATTEMPTS` times, n x backoff apart.

    Payments hold, post and void inside the transaction that changes the intent (and completes the
    settlement job), which only the PostgreSQL ledger can join; so the TigerBeetle backend is refused
    here with that reason rather than run without the guarantee.
    """
    import asyncpg

    from paymanager.ledger import LedgerUnavailableError, PostgresLedger
    from paymanager.logging import get_logger

    settings = runtime.settings
    if settings.ledger_backend != "postgres":
        raise RuntimeError(
            "payments need LEDGER_BACKEND=postgres: holds commit in the intent's own transaction, which "
            "TigerBeetle cannot join (the TigerBeetle adapter serves `paymanager ledger` commands)"
        )
    assert runtime.pool is not None
    ledger = PostgresLedger(runtime.pool)
    attempts = settings.ledger_connect_attempts
    for attempt in range(1, attempts + 1):
        try:
            await ledger.ping()
            runtime.ledger = ledger
            return
        except (OSError, asyncpg.PostgresError, LedgerUnavailableError) as exc:
            if attempt == attempts:
                raise
            get_logger("paymanager.bootstrap").warning(
                "ledger not reachable", attempt=attempt, error=str(exc)
            )
            await asyncio.sleep(settings.ledger_connect_backoff_ms * attempt / 1000)


async def connect_redis(runtime: Runtime) -> None:
    if runtime.settings.redis_url is None:
        return
    import redis.asyncio as aioredis

    client = aioredis.from_url(runtime.settings.redis_url.get_secret_value(), socket_connect_timeout=5)
    await client.ping()
    runtime.redis = client


def payments_of(runtime: Runtime) -> Payments:
    payments: Payments = runtime.registry[PAYMENTS]
    return payments


async def seed_system_accounts(runtime: Runtime) -> None:
    """Builds the payment component (it needs the ledger) and seeds the system accounts."""
    from paymanager.adapters.redis_events import RedisPublisher
    from paymanager.adapters.secret_box import SecretBox
    from paymanager.application.accounts.use_cases import seed_system_accounts as seed
    from paymanager.application.context import Payments
    from paymanager.application.intents.events import EventPublisher, NoPublisher
    from paymanager.domain.channels import ChannelRegistry

    settings = runtime.settings
    assert runtime.pool is not None
    kek = settings.psp_config_kek.get_secret_value() if settings.psp_config_kek else None
    previous = (
        settings.psp_config_kek_previous.get_secret_value() if settings.psp_config_kek_previous else None
    )
    publisher: EventPublisher = RedisPublisher(runtime.redis) if runtime.redis is not None else NoPublisher()
    payments = Payments(
        pool=runtime.pool,
        ledger=runtime.ledger,
        channels=ChannelRegistry(),
        box=SecretBox.from_config(kek, previous),
        settings=settings,
        publisher=publisher,
        process_id=runtime.process_id,
    )
    runtime.registry[PAYMENTS] = payments
    await seed(payments)


async def register_channels(runtime: Runtime) -> None:
    from paymanager.domain.channels import DEFAULT_CHANNELS
    from paymanager.logging import get_logger

    payments = payments_of(runtime)
    for channel in DEFAULT_CHANNELS:
        payments.channels.register(channel)
    get_logger("paymanager.bootstrap").info("channels registered", channels=payments.channels.names())


async def reconcile_stuck_intents(runtime: Runtime) -> None:
    from paymanager.application.intents.reconcile import reconcile

    settings = runtime.settings
    await reconcile(
        payments_of(runtime),
        batch_size=settings.reconcile_batch_size,
        max_intents=settings.reconcile_max_intents,
    )


async def api_services(runtime: Runtime) -> list[Service]:
    """The api role: the NOTIFY hub of the SSE streams, the sweeper, and the routes."""
    from paymanager.api.event_hub import IntentEventHub
    from paymanager.api.payments import install_payments_api
    from paymanager.application.sweeper import ApiSweeper

    payments = payments_of(runtime)
    hub = IntentEventHub(runtime.database_url)
    runtime.registry.setdefault("api_routers", []).append(install_payments_api(payments, hub))
    return [hub, ApiSweeper(payments)]


async def job_services(runtime: Runtime) -> list[Service]:
    """The job Worker for the queues of this process's roles, and the engine's maintenance; built once
    per process (the first job role asks, the others get nothing more)."""
    if JOB_SERVICES in runtime.registry:
        return []
    from paymanager.application.intents.confirm import SETTLE_KIND
    from paymanager.application.intents.invoice_sweep import INVOICE_QUEUE, SWEEP_KIND, invoice_sweep_handler
    from paymanager.application.intents.settle import settle_handler
    from paymanager.application.ledger_ops import EXPIRE_KIND, expire_pending_handler
    from paymanager.jobs import OUTBOX_SCHEDULE, Registry, Worker

    settings = runtime.settings
    assert runtime.pool is not None
    registry = Registry()
    queues: dict[str, int] = {}
    if Role.OUTBOX_WORKER in runtime.roles:
        registry.register(
            SETTLE_KIND,
            settle_handler(payments_of(runtime)),
            queue=OUTBOX_QUEUE,
            max_attempts=settings.outbox_max_attempts,
            backoff=OUTBOX_SCHEDULE,
        )
        registry.register(
            EXPIRE_KIND, expire_pending_handler(runtime.ledger), queue=OUTBOX_QUEUE, max_attempts=3
        )
        queues[OUTBOX_QUEUE] = settings.outbox_concurrency
    if Role.INVOICE_EXPIRY in runtime.roles:
        # One sweep at a time per process; the periodic schedule makes it one per slot cluster-wide.
        registry.register(SWEEP_KIND, invoice_sweep_handler(payments_of(runtime)), queue=INVOICE_QUEUE,
                          max_attempts=3)  # fmt: skip
        queues[INVOICE_QUEUE] = 1
    worker = Worker(runtime.pool, runtime.database_url, registry, queues, worker_options(runtime))
    # Services stop in reverse order: the worker (stop claiming, finish or give back its jobs)
    # before the maintenance, whose duty in progress is not work that has to finish.
    services: list[Service] = [maintenance(runtime), worker]
    runtime.registry[JOB_SERVICES] = services
    return services


def worker_options(runtime: Runtime) -> Any:
    from paymanager.jobs import WorkerOptions

    settings = runtime.settings
    return WorkerOptions(
        owner=runtime.process_id,
        lease_ms=settings.job_lease_ms,
        heartbeat_interval_ms=settings.job_heartbeat_interval_ms,
        poll_interval_ms=settings.outbox_interval_ms,
        claim_batch_max=settings.outbox_batch_size,
        claim_cooldown_ms=settings.outbox_claim_cooldown_ms,
        quick_claim_commit=settings.job_quick_claim_commit,
        redis_url=settings.redis_url.get_secret_value() if settings.redis_url else None,
    )


def maintenance(runtime: Runtime) -> Service:
    """The engine's maintenance (rescuer, pruner, promoter); it elects one leader cluster-wide."""
    from paymanager.application.intents.invoice_sweep import INVOICE_QUEUE, SWEEP_KIND
    from paymanager.application.ledger_ops import EXPIRE_KIND
    from paymanager.jobs import MaintenanceOptions, PeriodicJob, Retention
    from paymanager.jobs.maintenance import Maintenance

    settings = runtime.settings
    assert runtime.pool is not None
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
    service: Service = Maintenance(runtime.pool, runtime.database_url, options)
    return service
