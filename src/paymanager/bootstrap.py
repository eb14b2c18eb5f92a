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

from paymanager.adapters.card.acquirer import HttpCardAcquirer
from paymanager.adapters.giftcard.titreo import TitreoGiftCards
from paymanager.adapters.redis_events import RedisPublisher
from paymanager.adapters.secret_box import SecretBox
from paymanager.application.accounts.use_cases import seed_system_accounts
from paymanager.application.context import Payments
from paymanager.application.intents.backpressure import apply_default_max_depth
from paymanager.application.intents.confirm import OUTBOX_QUEUE, SETTLE_KIND
from paymanager.application.intents.event_hub import IntentEventHub
from paymanager.application.intents.events import EventPublisher, NoPublisher
from paymanager.application.intents.invoice_sweep import INVOICE_QUEUE, SWEEP_KIND, invoice_sweep_handler
from paymanager.application.intents.reconcile import reconcile
from paymanager.application.intents.settle import settle_handler
from paymanager.application.ledger_ops import EXPIRE_KIND, expire_pending_handler
from paymanager.application.sessions.actions import action_handlers
from paymanager.application.sessions.cleanup import cleanup_handler
from paymanager.application.sessions.context import Sessions
from paymanager.application.sessions.notify import SessionNotifier
from paymanager.application.sessions.outbox import CLEANUP_KIND, CLEANUP_QUEUE, SESSION_QUEUE
from paymanager.application.sweeper import ApiSweeper
from paymanager.config import Settings
from paymanager.db.database import Database
from paymanager.domain.channels import DEFAULT_CHANNELS, ChannelRegistry
from paymanager.jobs import (
    OUTBOX_SCHEDULE,
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
    # Checkout sessions: their providers and notifier (providers only with SESSIONS_ENABLED).
    sessions: Sessions | None = None

    async def close(self) -> None:
        """Close what `build` opened (Redis, the ledger's batches, the providers' clients); the
        Database is the caller's."""
        await self.ledger.close()
        if self.sessions is not None:
            with contextlib.suppress(Exception):
                await self.sessions.close()
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
    # Register PSP drivers: the session providers' drivers (gift cards, card acquiring) are the
    # ones this build ships; the step keeps its place in the order.
    sessions = await _step("register session providers", _sessions(settings, payments))
    hub = IntentEventHub(database) if Role.API in settings.worker_roles else None
    services = _role_services(settings, database, payments, hub, process_id, sessions)
    return Components(
        settings, database, process_id, ledger, redis, payments, hub, services, sessions=sessions
    )


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
JOB_ROLES = (Role.OUTBOX_WORKER, Role.INVOICE_EXPIRY, Role.SESSION_CLEANUP)


def _role_services(
    settings: Settings,
    database: Database,
    payments: Payments,
    hub: IntentEventHub | None,
    process_id: str,
    sessions: Sessions | None = None,
) -> tuple[Service, ...]:
    services: list[Service] = []
    if hub is not None:
        services += [hub, ApiSweeper(payments)]
    if any(role in settings.worker_roles for role in JOB_ROLES):
        # Services stop in reverse order: the worker (stop claiming, finish or give back its jobs)
        # before the maintenance, whose duty in progress is not work that has to finish.
        services += [
            maintenance(settings, database),
            job_worker(settings, database, payments, process_id, sessions=sessions),
        ]
    return tuple(services)


def job_worker(
    settings: Settings,
    database: Database,
    payments: Payments,
    process_id: str,
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
    if Role.INVOICE_EXPIRY in roles:
        # One sweep at a time per process; the periodic schedule makes it one per slot cluster-wide.
        registry.register(SWEEP_KIND, invoice_sweep_handler(payments), queue=INVOICE_QUEUE, max_attempts=3)
        queues[INVOICE_QUEUE] = 1
    if sessions is not None:
        _register_sessions(registry, queues, settings, sessions)
    return Worker(database.pool, database, registry, queues, worker_options(settings, process_id))


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
    return Maintenance(database.pool, database, options)
