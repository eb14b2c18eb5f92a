"""The composition root: the start-up sequence of DESIGN §3, the role branches, signals and shutdown.

Every mix of roles runs the same steps in the same order; a failing step logs and exits 1:

    load config -> open the database pool and check the schema -> connect the ledger ->
    seed and verify system accounts -> register channels -> reconcile stuck intents ->
    register PSP drivers -> start the workers of each role -> install signal handlers -> listen if api

Only this module (and the CLI that calls it) imports concrete adapters. Each step is a named
coroutine; a component plugs into its step through a `StartupHooks` entry, so the order lives here.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import asyncpg

from paymanager import __version__
from paymanager.config import Settings
from paymanager.db import migrations
from paymanager.db.pool import create_pool
from paymanager.logging import get_logger
from paymanager.roles import Role, describe

log = get_logger("paymanager.runtime")

# How long past its share of SHUTDOWN_TIMEOUT_MS a service's stop may run before it is abandoned.
STOP_GRACE_S = 2.0


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


def process_id() -> str:
    """`hostname.pid`, the identity of this process in leases, heartbeats and logs."""
    return f"{socket.gethostname()}.{os.getpid()}"


def resolve_database_url(settings: Settings) -> str:
    """`DATABASE_URL`, or the embedded PostgreSQL of the default set-up."""
    if settings.database_url is not None:
        return settings.database_url.get_secret_value()
    from paymanager.db.embedded import start_embedded

    return start_embedded(settings.embedded_pg_dir)


Step = Callable[["Runtime"], Awaitable[None]]


@dataclass
class StartupHooks:
    """What later components contribute to the start-up steps; each list runs in order."""

    connect_ledger: list[Step] = field(default_factory=list)
    seed_system_accounts: list[Step] = field(default_factory=list)
    register_channels: list[Step] = field(default_factory=list)
    reconcile_stuck_intents: list[Step] = field(default_factory=list)
    register_psp_drivers: list[Step] = field(default_factory=list)
    role_workers: dict[Role, list[Callable[[Runtime], Awaitable[list[Service]]]]] = field(
        default_factory=dict
    )
    shutdown: list[Step] = field(default_factory=list)


class ProcessHeartbeat:
    """Keeps this process's row in `process` fresh, and marks it stopped on shutdown."""

    name = "process-heartbeat"

    def __init__(self, pool: asyncpg.Pool, pid: str, roles: frozenset[Role], interval_ms: int) -> None:
        self._pool = pool
        self._id = pid
        self._roles = roles
        self._interval_s = interval_ms / 1000
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self._pool.execute(
            """
            INSERT INTO process (id, hostname, pid, roles, version, started_at, heartbeat_at)
            VALUES ($1, $2, $3, $4, $5, now(), now())
            ON CONFLICT (id) DO UPDATE
               SET roles = EXCLUDED.roles, version = EXCLUDED.version, started_at = now(),
                   heartbeat_at = now(), stopped_at = NULL
            """,
            self._id,
            socket.gethostname(),
            os.getpid(),
            describe(self._roles),
            __version__,
        )
        self._task = asyncio.create_task(self._beat(), name=self.name)

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                await self._pool.execute("UPDATE process SET heartbeat_at = now() WHERE id = $1", self._id)
            except (asyncpg.PostgresError, OSError) as exc:
                # A missed beat is not fatal: the probe reports us stale only after several.
                log.warning("process heartbeat failed", error=str(exc))

    async def stop(self, timeout_s: float) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        with contextlib.suppress(asyncpg.PostgresError, OSError, asyncpg.InterfaceError):
            await self._pool.execute("UPDATE process SET stopped_at = now() WHERE id = $1", self._id)


class Runtime:
    """One paymanager process: its settings, pool, ledger, services and HTTP server."""

    def __init__(self, settings: Settings, hooks: StartupHooks | None = None) -> None:
        self.settings = settings
        self.hooks = hooks if hooks is not None else default_hooks()
        self.roles = settings.worker_roles
        self.process_id = process_id()
        self.database_url = ""
        self.pool: asyncpg.Pool | None = None
        self.ledger: Any = None
        self.redis: Any = None
        self.services: list[Service] = []
        # Components share objects they build in one step and use in a later one (channels, drivers).
        self.registry: dict[str, Any] = {}
        self._stop = asyncio.Event()
        self._http: Any = None
        self._http_task: asyncio.Task[None] | None = None

    # --- the start-up steps, in order ---------------------------------------------------------

    async def open_database(self) -> None:
        self.database_url = resolve_database_url(self.settings)
        self.pool = await create_pool(
            self.database_url,
            min_size=self.settings.db_pool_min_size,
            max_size=self.settings.db_pool_max_size,
            statement_timeout_ms=self.settings.db_statement_timeout_ms,
            application_name=f"paymanager:{self.process_id}",
        )
        async with self.pool.acquire() as conn:
            await migrations.check_schema(conn)

    async def connect_ledger(self) -> None:
        await self._run_hooks(self.hooks.connect_ledger)

    async def seed_system_accounts(self) -> None:
        await self._run_hooks(self.hooks.seed_system_accounts)

    async def register_channels(self) -> None:
        await self._run_hooks(self.hooks.register_channels)

    async def reconcile_stuck_intents(self) -> None:
        await self._run_hooks(self.hooks.reconcile_stuck_intents)

    async def register_psp_drivers(self) -> None:
        await self._run_hooks(self.hooks.register_psp_drivers)

    async def start_role_workers(self) -> None:
        assert self.pool is not None
        heartbeat = ProcessHeartbeat(
            self.pool, self.process_id, self.roles, self.settings.process_heartbeat_interval_ms
        )
        await self._start_service(heartbeat)
        for role in Role:
            if role not in self.roles:
                continue
            for factory in self.hooks.role_workers.get(role, []):
                for service in await factory(self):
                    await self._start_service(service)
            if role is not Role.API:
                log.info(f"{role.value} starting")

    def install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop, sig.name)

    async def listen_if_api(self) -> None:
        if Role.API not in self.roles:
            log.info("started in headless mode", roles=describe(self.roles))
            return
        import uvicorn

        from paymanager.api.app import create_app

        app = create_app(self)
        config = uvicorn.Config(
            app,
            host=self.settings.host,
            port=self.settings.port,
            log_config=None,
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=max(1, self.settings.shutdown_timeout_ms // 1000),
        )
        # Bind here, not in uvicorn: uvicorn reports a failed bind with sys.exit(), which would tear
        # through the event loop instead of failing this start-up step with exit code 1.
        sock = socket.create_server((self.settings.host, self.settings.port))
        self._http = _EmbeddedServer(config)
        self._http_task = asyncio.create_task(self._http.serve(sockets=[sock]), name="http")
        while not self._http.started:
            if self._http_task.done():
                await self._http_task
                raise RuntimeError(
                    f"the HTTP server did not start on {self.settings.host}:{self.settings.port}"
                )
            await asyncio.sleep(0.01)
        log.info(
            "listening",
            url=f"http://{self.settings.host}:{self.settings.port}",
            docs=f"http://127.0.0.1:{self.settings.port}/docs",
        )

    # --- running and stopping --------------------------------------------------------------------

    async def start(self) -> None:
        steps: list[tuple[str, Callable[[], Awaitable[None]]]] = [
            ("open the database pool and check the schema version", self.open_database),
            ("connect the ledger", self.connect_ledger),
            ("seed and verify system accounts", self.seed_system_accounts),
            ("register channels", self.register_channels),
            ("reconcile stuck intents", self.reconcile_stuck_intents),
            ("register PSP drivers", self.register_psp_drivers),
            ("start the workers of each role", self.start_role_workers),
        ]
        for name, step in steps:
            started = time.perf_counter()
            try:
                await step()
            except Exception as exc:
                raise StartupError(name, exc) from exc
            log.debug("start-up step done", step=name, ms=round((time.perf_counter() - started) * 1000, 1))
        self.install_signal_handlers()
        try:
            await self.listen_if_api()
        except Exception as exc:
            raise StartupError("listen", exc) from exc

    def request_stop(self, reason: str = "requested") -> None:
        if not self._stop.is_set():
            log.info("shutdown requested", reason=reason)
        self._stop.set()

    async def wait_stopped(self) -> None:
        await self._stop.wait()

    @property
    def stopping(self) -> bool:
        """True once shutdown was requested: long-lived work (event streams) ends itself."""
        return self._stop.is_set()

    async def shutdown(self) -> None:
        """Stop listening, let running work finish within the timeout, release the rest, close."""
        timeout_s = self.settings.shutdown_timeout_ms / 1000
        deadline = time.monotonic() + timeout_s
        # First of all, nothing takes new work (workers stop claiming), while HTTP drains.
        for service in self.services:
            stop_taking_work = getattr(service, "stop_taking_work", None)
            if stop_taking_work is not None:
                stop_taking_work()
        if self._http is not None and self._http_task is not None:
            self._http.should_exit = True
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._http_task, timeout=max(0.1, deadline - time.monotonic()))
        # Services stop in reverse start order; the process heartbeat (first started) stops last.
        for service in reversed(self.services):
            remaining = max(0.1, deadline - time.monotonic())
            try:
                # Bounded here too: a service stuck past its own timeout must not hold the process.
                await asyncio.wait_for(service.stop(remaining), timeout=remaining + STOP_GRACE_S)
            except Exception as exc:  # one broken service must not keep the others from stopping
                log.error("service did not stop cleanly", service=service.name, error=repr(exc))
        self.services.clear()
        await self._run_hooks(self.hooks.shutdown, best_effort=True)
        if self.redis is not None:
            with contextlib.suppress(Exception):
                await self.redis.aclose()
        if self.pool is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.pool.close(), timeout=max(0.1, deadline - time.monotonic()))
            self.pool = None
        log.info("stopped")

    async def run(self, after_start: Step | None = None) -> None:
        """Start, serve until SIGTERM/SIGINT, shut down. `after_start` runs beside the roles once
        everything listens (the demo of `make run`); its failure is logged, never fatal."""
        extra: asyncio.Task[None] | None = None
        try:
            await self.start()
            if after_start is not None:
                extra = asyncio.create_task(self._run_beside(after_start), name="after-start")
            await self.wait_stopped()
        finally:
            if extra is not None:
                extra.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await extra
            await self.shutdown()

    async def _run_beside(self, step: Step) -> None:
        try:
            await step(self)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("after-start task failed", error=repr(exc))

    # --- internals ---------------------------------------------------------------------------------

    async def _start_service(self, service: Service) -> None:
        await service.start()
        self.services.append(service)

    async def _run_hooks(self, hooks: list[Step], *, best_effort: bool = False) -> None:
        for hook in hooks:
            try:
                await hook(self)
            except Exception as exc:
                if not best_effort:
                    raise
                log.error("shutdown hook failed", hook=getattr(hook, "__name__", repr(hook)), error=repr(exc))


class _EmbeddedServer:
    """uvicorn's Server without its own signal handling: the runtime owns SIGTERM/SIGINT."""

    def __new__(cls, config: Any) -> Any:
        import uvicorn

        class Server(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self) -> Iterator[None]:
                yield

        return Server(config)


def default_hooks() -> StartupHooks:
    """The components this build ships, wired into their start-up steps."""
    hooks = StartupHooks()
    from paymanager import bootstrap

    bootstrap.install(hooks)
    return hooks
