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
import dataclasses
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import asyncpg
import redis.asyncio as aioredis

from paymanager.adapters.card.acquirer import HttpCardAcquirer
from paymanager.adapters.giftcard.titreo import TitreoGiftCards
from paymanager.adapters.psp.drivers import DRIVERS
from paymanager.adapters.psp.port import PspDriver
from paymanager.adapters.redis_events import RedisPublisher
from paymanager.adapters.secret_box import SecretBox
from paymanager.adapters.webhook_http import HttpSender
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
from paymanager.application.ledger_ops import EXPIRE_KIND, expire_pending_handler, joins_transactions
from paymanager.application.psp.balance import BalanceMonitor
from paymanager.application.psp.config import load_drivers
from paymanager.application.psp.payout import (
    PAYOUT_KIND,
    PAYOUT_MAX_ATTEMPTS,
    PayoutSettings,
    payout_handler,
    queue_of,
)
from paymanager.application.psp.store import PspStore
from paymanager.application.psp.webhooks import WEBHOOK_KIND as PSP_WEBHOOK_KIND
from paymanager.application.psp.webhooks import WEBHOOK_QUEUE as PSP_WEBHOOK_QUEUE
from paymanager.application.psp.webhooks import webhook_handler as psp_webhook_handler
from paymanager.application.refunds.execute import REFUND_KIND, refund_handler
from paymanager.application.sessions.actions import action_handlers
from paymanager.application.sessions.cleanup import cleanup_handler
from paymanager.application.sessions.context import Sessions
from paymanager.application.sessions.notify import SessionNotifier
from paymanager.application.sessions.outbox import CLEANUP_KIND, CLEANUP_QUEUE, SESSION_QUEUE
from paymanager.application.storage import upkeep as storage
from paymanager.application.sweeper import ApiSweeper
from paymanager.application.webhooks.address_guard import AddressGuard, Resolver, system_resolver
from paymanager.application.webhooks.deliver import (
    DELIVER_KIND,
    WEBHOOK_QUEUE,
    EndpointSlots,
    WebhookDeliverer,
    dead_letter_with_job,
)
from paymanager.config import Settings
from paymanager.db.database import Database
from paymanager.domain.channels import DEFAULT_CHANNELS, ChannelRegistry
from paymanager.jobs import (
    OUTBOX_SCHEDULE,
    DeadHook,
    DeadJob,
    MaintenanceOptions,
    PeriodicJob,
    Registry,
    Retention,
    Schedule,
    Worker,
    WorkerOptions,
    set_global_concurrency,
    set_rate_limit,
)
from paymanager.jobs.maintenance import Maintenance
from paymanager.ledger import Ledger, LedgerUnavailableError, PostgresLedger, open_ledger
from paymanager.logging import get_logger
from paymanager.metrics import QUERY_GAUGES
from paymanager.rate_text import parse_rate_limit
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
    ledger: Ledger
    redis: aioredis.Redis | None
    payments: Payments
    # The api role's NOTIFY hub of the SSE streams (None without the role).
    event_hub: IntentEventHub | None
    # The services of this process's roles, in start order (they stop in reverse).
    services: tuple[Service, ...]
    # The SSRF guard of webhook URLs (registration and delivery share it) and the delivery's client.
    webhook_guard: AddressGuard
    webhook_sender: HttpSender
    # Set when the process shuts down: long-lived work (event streams) ends itself.
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    # The PSP drivers of this process, by PSP name (the psp-worker's PSP_NAMES; for the api, those
    # configured, whose webhooks it verifies).
    psp_drivers: dict[str, PspDriver] = field(default_factory=dict)
    # Checkout sessions: their providers and notifier (providers only with SESSIONS_ENABLED).
    sessions: Sessions | None = None

    async def close(self) -> None:
        """Close what `build` opened (Redis, the ledger's batches, the PSP drivers, the session
        providers' clients); the Database is the caller's."""
        for driver in self.psp_drivers.values():
            with contextlib.suppress(Exception):
                await driver.aclose()
        await self.ledger.close()
        if self.payments.side_pool is not None:
            await self.payments.side_pool.close()
        await self.webhook_sender.close()
        if self.sessions is not None:
            with contextlib.suppress(Exception):
                await self.sessions.close()
        if self.redis is not None:
            with contextlib.suppress(Exception):
                await self.redis.aclose()


async def build(
    settings: Settings,
    database: Database,
    *,
    process_id: str,
    reconcile_intents: bool = True,
    resolver: Resolver = system_resolver,
) -> Components:
    """Run the start-up steps from the ledger to the role services (built, not started).

    Raises `StartupError` naming the step that failed. `reconcile_intents=False` skips the
    reconciler, for a caller that wants the components without touching any intent (tests);
    `resolver` resolves webhook hosts for the SSRF guard (tests resolve names their own way)."""
    ledger = await _step("connect the ledger", connect_ledger(settings, database))
    redis = await _step("connect Redis", connect_redis(settings))
    payments = _payments(settings, database, ledger, redis, process_id)
    if not joins_transactions(ledger):
        payments.side_pool = await _step(
            "open the ledger decisions' pool",
            database.open_pool(
                max_size=settings.db_decision_pool_size,
                statement_timeout_ms=settings.db_statement_timeout_ms,
                application_name="paymanager:decisions",
            ),
        )
    await _step("prepare storage", storage.prepare(database.pool, settings))
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
    drivers = await _step("register PSP drivers", register_psp_drivers(settings, payments))
    if Role.PSP_WORKER in settings.worker_roles:
        await _step("limit the PSP queues", _limit_psp_queues(database, settings))
    hub = IntentEventHub(database) if Role.API in settings.worker_roles else None
    guard = AddressGuard(settings.webhook_allowed_hosts, resolver)
    sender = HttpSender(timeout_ms=settings.webhook_timeout_ms, connections_max=settings.webhook_concurrency)
    deliverer = WebhookDeliverer(
        payments, guard, sender, EndpointSlots(settings.webhook_endpoint_concurrency),
        Schedule(settings.webhook_retry_schedule_ms),
    )  # fmt: skip
    register_gauges(QUERY_GAUGES)
    sessions = await _step("register session providers", _sessions(settings, payments))
    services = _role_services(settings, database, payments, hub, process_id, drivers, deliverer, sessions)
    return Components(
        settings,
        database,
        process_id,
        ledger,
        redis,
        payments,
        hub,
        services,
        guard,
        sender,
        psp_drivers=drivers,
        sessions=sessions,
    )


async def register_psp_drivers(settings: Settings, payments: Payments) -> dict[str, PspDriver]:
    """A psp-worker needs a driver for every name in PSP_NAMES (a missing configuration stops start-up,
    naming the PSP); the api verifies the webhooks of the PSPs that are configured."""
    connections = max(16, settings.psp_concurrency * 2)
    if Role.PSP_WORKER in settings.worker_roles:
        return await load_drivers(
            payments.pool, payments.box, settings.psp_names, max_connections=connections
        )
    if Role.API in settings.worker_roles:
        async with payments.pool.acquire() as conn:
            configured = [c.psp for c in await PspStore(conn).all_configs() if c.psp in DRIVERS]
        return await load_drivers(payments.pool, payments.box, tuple(configured), max_connections=16)
    return {}


async def _limit_psp_queues(database: Database, settings: Settings) -> None:
    """PSP_RATE_LIMIT and PSP_GLOBAL_CONCURRENCY on each `psp.<name>` queue: over them, payouts wait."""
    rate = parse_rate_limit(settings.psp_rate_limit)
    async with database.pool.acquire() as conn:
        for name in settings.psp_names:
            queue = queue_of(name)
            if rate is None:
                await set_rate_limit(conn, queue, max_jobs=None)
            else:
                await set_rate_limit(conn, queue, max_jobs=rate[0], window_ms=rate[1])
            await set_global_concurrency(conn, queue, settings.psp_global_concurrency)


async def _sessions(settings: Settings, payments: Payments) -> Sessions:
    """Checkout sessions' component. With SESSIONS_ENABLED the providers' drivers are built from their
    configuration (config.py refuses to start without it: there is no silent stand-in)."""
    sessions = Sessions(payments, SessionNotifier())
    if settings.sessions_enabled:
        assert settings.giftcard_base_url is not None
        assert settings.card_base_url is not None
        sessions.gift_cards = TitreoGiftCards(
            settings.giftcard_base_url,
            api_key=settings.giftcard_api_key.get_secret_value() if settings.giftcard_api_key else None,
            timeout_ms=settings.provider_timeout_ms,
        )
        sessions.cards = HttpCardAcquirer(
            settings.card_base_url,
            api_key=settings.card_api_key.get_secret_value() if settings.card_api_key else None,
            timeout_ms=settings.provider_timeout_ms,
        )
        log.info(
            "session providers registered", giftcard=settings.giftcard_base_url, card=settings.card_base_url
        )
    return sessions


async def _step(name: str, work: Awaitable[T]) -> T:
    started = time.perf_counter()
    try:
        result = await work
    except Exception as exc:
        raise StartupError(name, exc) from exc
    log.debug("start-up step done", step=name, ms=round((time.perf_counter() - started) * 1000, 1))
    return result


async def connect_ledger(settings: Settings, database: Database) -> Ledger:
    """The configured ledger, tried `LEDGER_CONNECT_ATTEMPTS` times, n x `LEDGER_CONNECT_BACKOFF_MS` apart.

    PostgreSQL: the ledger on the process pool (payments hold, post and void in the intent's own
    transaction). TigerBeetle: the cluster of `TB_ADDRESS` (every replica's address, comma-separated);
    payments then follow the decide-then-apply protocol of application/holds/resolve.py. When no try
    reached the ledger, `LedgerUnavailableError` says so and the process exits 1.
    """
    if settings.ledger_backend == "tigerbeetle":
        return await open_ledger(
            "tigerbeetle", pool=database.pool, tb_address=settings.tb_address,
            tb_cluster_id=settings.tb_cluster_id, attempts=settings.ledger_connect_attempts,
            backoff_ms=settings.ledger_connect_backoff_ms,
        )  # fmt: skip
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
    ledger: Ledger,
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
JOB_ROLES = (Role.OUTBOX_WORKER, Role.INVOICE_EXPIRY, Role.PSP_WORKER, Role.SESSION_CLEANUP)


def _role_services(
    settings: Settings,
    database: Database,
    payments: Payments,
    hub: IntentEventHub | None,
    process_id: str,
    drivers: dict[str, PspDriver],
    deliverer: WebhookDeliverer,
    sessions: Sessions | None = None,
) -> tuple[Service, ...]:
    # Every process keeps the storage up, whatever its roles: one of them runs each duty per interval.
    services: list[Service] = [storage.StorageUpkeep(database.pool, settings)]
    if hub is not None:
        services += [hub, ApiSweeper(payments)]
    if any(role in settings.worker_roles for role in JOB_ROLES):
        # Services stop in reverse order: the worker (stop claiming, finish or give back its jobs)
        # before the maintenance, whose duty in progress is not work that has to finish.
        services.append(maintenance(settings, database))
        job_roles = (Role.OUTBOX_WORKER, Role.INVOICE_EXPIRY, Role.SESSION_CLEANUP)
        if any(role in settings.worker_roles for role in job_roles):
            services.append(
                job_worker(settings, database, payments, process_id, deliverer, sessions=sessions)
            )
        if Role.PSP_WORKER in settings.worker_roles:
            services.append(psp_worker(settings, database, payments, process_id, drivers))
            if settings.balance_monitor_enabled:
                services.append(BalanceMonitor(payments, drivers))
    return tuple(services)


def psp_worker(
    settings: Settings, database: Database, payments: Payments, process_id: str, drivers: dict[str, PspDriver]
) -> Worker:
    """The psp-worker's job Worker: one `psp.<name>` queue per PSP, PSP_CONCURRENCY payouts at once
    each. Its lease is PSP_RETRY_LEASE_SEC while steps have retries (PSP_MAX_RETRIES > 0), else
    PSP_LEASE_SEC: the time after which another process takes over the payout of a lost one."""
    registry = Registry()
    handler = payout_handler(
        payments,
        drivers,
        PayoutSettings(
            settings.psp_poll_interval_ms,
            settings.psp_max_retries,
            end_batch_max=settings.outbox_batch_size,
            end_batches_in_flight=settings.outbox_settle_batches_in_flight,
        ),
    )
    registry.register(
        PAYOUT_KIND, handler, queue=queue_of(settings.psp_names[0]), max_attempts=PAYOUT_MAX_ATTEMPTS
    )
    queues = {queue_of(name): settings.psp_concurrency for name in settings.psp_names}
    # Webhooks the api stored: applied by any psp-worker, whatever PSPs it drives.
    registry.register(
        PSP_WEBHOOK_KIND, psp_webhook_handler(payments), queue=PSP_WEBHOOK_QUEUE, max_attempts=10
    )
    queues[PSP_WEBHOOK_QUEUE] = 4
    lease_sec = settings.psp_retry_lease_sec if settings.psp_max_retries > 0 else settings.psp_lease_sec
    # A heartbeat at most a third of the lease apart: a slow PSP answer must never lose a live lease.
    options = dataclasses.replace(
        worker_options(settings, process_id),
        lease_ms=lease_sec * 1000,
        heartbeat_interval_ms=min(settings.job_heartbeat_interval_ms, lease_sec * 1000 // 3),
        poll_interval_ms=settings.psp_poll_interval_ms,
    )
    return Worker(database.pool, database, registry, queues, options, on_dead=dead_job_hook(database))


def job_worker(
    settings: Settings,
    database: Database,
    payments: Payments,
    process_id: str,
    deliverer: WebhookDeliverer,
    *,
    sessions: Sessions | None = None,
) -> Worker:
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
        # Webhooks have a queue of their own, so a slow receiver never takes a settlement's slot;
        # within it, each endpoint is bounded per process (deliver.EndpointSlots).
        registry.register(
            DELIVER_KIND,
            deliverer.deliver,
            queue=WEBHOOK_QUEUE,
            max_attempts=settings.webhook_max_attempts,
            backoff=deliverer.schedule,
        )
        queues[WEBHOOK_QUEUE] = settings.webhook_concurrency
        registry.register(
            REFUND_KIND,
            refund_handler(payments),
            queue=OUTBOX_QUEUE,
            max_attempts=settings.outbox_max_attempts,
            backoff=OUTBOX_SCHEDULE,
        )
    if Role.INVOICE_EXPIRY in roles:
        # One sweep at a time per process; the periodic schedule makes it one per slot cluster-wide.
        registry.register(SWEEP_KIND, invoice_sweep_handler(payments), queue=INVOICE_QUEUE, max_attempts=3)
        queues[INVOICE_QUEUE] = 1
    if sessions is not None:
        _register_sessions(registry, queues, settings, sessions)
    options = worker_options(settings, process_id)
    return Worker(database.pool, database, registry, queues, options, on_dead=dead_job_hook(database))


def dead_job_hook(database: Database) -> DeadHook:
    """The engine's on-dead hook of every worker and maintenance: the log line, and a webhook
    delivery whose job died dead-lettered with it."""

    async def on_dead(job: DeadJob) -> None:
        await log_dead_job(job)
        if job.kind == DELIVER_KIND:
            await dead_letter_with_job(database.pool, job)

    return on_dead


async def log_dead_job(job: DeadJob) -> None:
    """The engine's on-dead hook: one line at error level per dead job, for the alerting on logs."""
    error = (job.error or {}).get("error") if isinstance(job.error, dict) else None
    log.error(
        "job dead", job_id=job.id, kind=job.kind, queue=job.queue, attempts=job.attempt,
        last_error=str(error)[:500] if error is not None else None,
    )  # fmt: skip


def _register_sessions(
    registry: Registry, queues: dict[str, int], settings: Settings, sessions: Sessions
) -> None:
    """The session actions (outbox-worker, with the providers) and the cleanup (session-cleanup)."""
    roles = settings.worker_roles
    if Role.OUTBOX_WORKER in roles and sessions.gift_cards is not None and sessions.cards is not None:
        # The actions' own schedule and attempts are set on each job at enqueue (outbox.py).
        for kind, handler in action_handlers(sessions).items():
            registry.register(kind, handler, queue=SESSION_QUEUE)
        queues[SESSION_QUEUE] = settings.session_action_concurrency
    if Role.SESSION_CLEANUP in roles:
        # One tick at a time per process; the periodic schedule makes it one per slot cluster-wide.
        registry.register(CLEANUP_KIND, cleanup_handler(sessions), queue=CLEANUP_QUEUE, max_attempts=3)
        queues[CLEANUP_QUEUE] = 1


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
            PeriodicJob(
                CLEANUP_KIND, CLEANUP_KIND, queue=CLEANUP_QUEUE, interval_ms=settings.cleanup_interval_ms
            ),
        ),
    )
    return Maintenance(database.pool, database, options, on_dead=dead_job_hook(database))
