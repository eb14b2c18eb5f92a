"""One paymanager process: the start-up sequence of DESIGN §3, the role branches, signals and shutdown.

Every mix of roles runs the same steps in the same order; a failing step logs and exits 1:

    load config -> open the database pool and check the schema -> connect the ledger ->
    seed and verify system accounts -> register channels -> reconcile stuck intents ->
    register PSP drivers -> start the workers of each role -> install signal handlers -> listen if api

The steps from the ledger to the role services are `bootstrap.build`, which returns the typed
`Components`; this module opens the database before them, and starts, serves and stops after them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import asyncpg

from paymanager import __version__, metrics
from paymanager.bootstrap import Components, Service, StartupError, build
from paymanager.config import Settings
from paymanager.db import migrations
from paymanager.db.database import Database, open_database
from paymanager.db.pool import Pool
from paymanager.logging import get_logger
from paymanager.roles import Role, describe

__all__ = ["Runtime", "Service", "StartupError", "process_id"]

log = get_logger("paymanager.runtime")

# The roles whose services this build runs; a role outside it starts nothing and says so.
ROLES_WITH_WORK = frozenset({Role.OUTBOX_WORKER, Role.PSP_WORKER, Role.INVOICE_EXPIRY, Role.SESSION_CLEANUP})

# How long past its share of SHUTDOWN_TIMEOUT_MS a service's stop may run before it is abandoned.
STOP_GRACE_S = 2.0


def process_id() -> str:
    """`hostname.pid`, the identity of this process in leases, heartbeats and logs."""
    return f"{socket.gethostname()}.{os.getpid()}"


T = TypeVar("T")
AfterStart = Callable[[Components], Awaitable[None]]


class ProcessHeartbeat:
    """Keeps this process's row in `process` fresh, and marks it stopped on shutdown."""

    name = "process-heartbeat"

    def __init__(self, pool: Pool, pid: str, roles: frozenset[Role], interval_ms: int) -> None:
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
    """One paymanager process: its settings, database, components, services and HTTP server."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.roles = settings.worker_roles
        self.process_id = process_id()
        self.database: Database | None = None
        self.components: Components | None = None
        self.services: list[Service] = []
        self._stop = asyncio.Event()
        self._http: Any = None
        self._http_task: asyncio.Task[None] | None = None
        self._metrics: MetricsServer | None = None

    # --- the start-up steps, in order ---------------------------------------------------------

    async def open_database(self) -> Database:
        database = await open_database(self.settings, application_name=f"paymanager:{self.process_id}")
        self.database = database
        async with database.pool.acquire() as conn:
            await migrations.check_schema(conn)
        return database

    async def start_role_workers(self, components: Components) -> None:
        heartbeat = ProcessHeartbeat(
            components.database.pool, self.process_id, self.roles, self.settings.process_heartbeat_interval_ms
        )
        await self._start_service(heartbeat)
        for service in components.services:
            await self._start_service(service)
        for role in Role:
            if role in self.roles and role in ROLES_WITH_WORK:
                log.info(f"{role.value} starting")
            elif role in self.roles and role is not Role.API:
                # Saying "starting" for a role that runs nothing would hide a misconfiguration.
                log.warning(f"{role.value} has nothing to run in this build", role=role.value)
        if Role.PSP_WORKER in self.roles and self.settings.balance_monitor_enabled:
            log.info("BalanceMonitor starting", psps=list(self.settings.psp_names))

    def install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop, sig.name)

    async def listen_if_api(self, components: Components) -> None:
        if Role.API not in self.roles:
            if self.settings.metrics_port:
                metrics_server = MetricsServer(components)
                try:
                    await metrics_server.start(self.settings.host, self.settings.metrics_port)
                    self._metrics = metrics_server
                except OSError as exc:
                    # Another process of this host holds the port (two workers on one machine
                    # outside containers): the work matters more than its metrics.
                    log.warning("metrics not served", port=self.settings.metrics_port, error=str(exc))
            log.info(
                "started in headless mode",
                roles=describe(self.roles),
                metrics_port=self.settings.metrics_port,
            )
            return
        # Imported here: a headless process never loads the HTTP stack.
        import uvicorn

        from paymanager.api.app import create_app

        app = create_app(components)
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

    async def start(self) -> Components:
        database = await _step("open the database pool and check the schema version", self.open_database())
        components = await build(self.settings, database, process_id=self.process_id)
        self.components = components
        await _step("start the workers of each role", self.start_role_workers(components))
        self.install_signal_handlers()
        await _step("listen", self.listen_if_api(components))
        return components

    def request_stop(self, reason: str = "requested") -> None:
        if not self._stop.is_set():
            log.info("shutdown requested", reason=reason)
        self._stop.set()
        if self.components is not None:
            self.components.stopping.set()

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
        # A start that failed before the database opened has nothing to stop: its one line is the
        # start-up failure, not a "stopped" beside it.
        opened = self.database is not None
        if self.components is not None:
            self.components.stopping.set()
        # First of all, nothing takes new work (workers stop claiming), while HTTP drains.
        for service in self.services:
            stop_taking_work = getattr(service, "stop_taking_work", None)
            if stop_taking_work is not None:
                stop_taking_work()
        if self._http is not None and self._http_task is not None:
            self._http.should_exit = True
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._http_task, timeout=max(0.1, deadline - time.monotonic()))
        if self._metrics is not None:
            await self._metrics.stop()
        # Services stop in reverse start order; the process heartbeat (first started) stops last.
        for service in reversed(self.services):
            remaining = max(0.1, deadline - time.monotonic())
            try:
                # Bounded here too: a service stuck past its own timeout must not hold the process.
                await asyncio.wait_for(service.stop(remaining), timeout=remaining + STOP_GRACE_S)
            except Exception as exc:  # one broken service must not keep the others from stopping
                log.error("service did not stop cleanly", service=service.name, error=repr(exc))
        self.services.clear()
        if self.components is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.components.close(), timeout=max(0.1, deadline - time.monotonic()))
        if self.database is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.database.close(), timeout=max(0.1, deadline - time.monotonic()))
            self.database = None
        if opened:
            log.info("stopped")

    async def run(self, after_start: AfterStart | None = None) -> None:
        """Start, serve until SIGTERM/SIGINT, shut down. `after_start` runs beside the roles once
        everything listens (the demo of `make run`); its failure is logged, never fatal."""
        extra: asyncio.Task[None] | None = None
        try:
            components = await self.start()
            if after_start is not None:
                extra = asyncio.create_task(self._run_beside(after_start, components), name="after-start")
            await self.wait_stopped()
        finally:
            if extra is not None:
                extra.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await extra
            await self.shutdown()

    async def _run_beside(self, step: AfterStart, components: Components) -> None:
        try:
            await step(components)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("after-start task failed", error=repr(exc))

    # --- internals ---------------------------------------------------------------------------------

    async def _start_service(self, service: Service) -> None:
        await service.start()
        self.services.append(service)


async def _step(name: str, work: Awaitable[T]) -> T:
    try:
        return await work
    except StartupError:
        raise
    except Exception as exc:
        raise StartupError(name, exc) from exc


class _EmbeddedServer:
    """uvicorn's Server without its own signal handling: the runtime owns SIGTERM/SIGINT."""

    def __new__(cls, config: Any) -> Any:
        import uvicorn

        class Server(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self) -> Iterator[None]:
                yield

        return Server(config)


class MetricsServer:
    """`/metrics` and `/livez` of a process without the api role, on METRICS_PORT.

    A few lines of asyncio rather than uvicorn (a headless process does not load the HTTP stack) or
    prometheus_client's own server (it answers from a thread, which cannot await the pool that the
    query gauges read). `/livez` answers from the event loop alone: an outage of PostgreSQL must
    not make every worker look dead (readiness is the exec probe's `paymanager health`)."""

    REQUEST_BYTES_MAX = 8192

    def __init__(self, components: Components) -> None:
        self._components = components
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._serve, host, port)
        log.info("metrics listening", url=f"http://{host}:{port}/metrics")

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), timeout=1)
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
            parts = head.split(b"\r\n", 1)[0].split()
            method, path = (parts[0], parts[1].split(b"?")[0]) if len(parts) >= 2 else (b"", b"")
            if method not in (b"GET", b"HEAD"):
                status, body, kind = "405 Method Not Allowed", b"GET only\n", "text/plain"
            elif path == b"/livez":
                status, body, kind = "200 OK", b'{"status":"ok"}', "application/json"
            elif path == b"/metrics":
                settings = self._components.settings
                body = await metrics.render(
                    self._components.database.pool, settings.metrics_query_interval_ms
                )
                status, kind = "200 OK", metrics.CONTENT_TYPE_LATEST
            else:
                status, body, kind = "404 Not Found", b"/metrics or /livez\n", "text/plain"
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n".encode()
                + (body if method != b"HEAD" else b"")
            )
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
