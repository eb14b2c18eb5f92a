"""`async with JobEngine(...)`: a worker and the maintenance it needs, started and stopped together.

A Worker alone never rescues the leases of a crashed worker, promotes delayed jobs when no worker
polls, or prunes finished jobs: that is Maintenance's duty, safe to run in every process (one leads
at a time). JobEngine runs both, and `run_until_signal` serves until SIGINT or SIGTERM, the way a
program on the library alone wants to run.
"""

from __future__ import annotations

import asyncio
import signal
from types import TracebackType

from paymanager.db.database import Database, over_pool
from paymanager.db.pool import Pool
from paymanager.jobs.events import DeadHook, ErrorHook
from paymanager.jobs.maintenance import Maintenance
from paymanager.jobs.options import MaintenanceOptions, WorkerOptions
from paymanager.jobs.registry import Registry
from paymanager.jobs.worker import Worker

STOP_TIMEOUT_S = 10.0


class JobEngine:
    """A Worker and a Maintenance over one pool: `async with JobEngine(...) as engine:` starts both
    (the worker refuses a pool without the engine's codecs, CodecError) and stops both on the way
    out."""

    def __init__(
        self,
        pool: Pool,
        database: Database | str,
        registry: Registry,
        queues: dict[str, int],
        worker_options: WorkerOptions | None = None,
        maintenance_options: MaintenanceOptions | None = None,
        *,
        on_dead: DeadHook | None = None,
        on_error: ErrorHook | None = None,
        stop_timeout_s: float = STOP_TIMEOUT_S,
    ) -> None:
        self._pool = pool
        self.database = over_pool(pool, database)
        self.worker = Worker(
            pool, self.database, registry, queues, worker_options, on_dead=on_dead, on_error=on_error
        )
        self.maintenance = Maintenance(pool, self.database, maintenance_options, on_dead=on_dead)
        self._stop_timeout_s = stop_timeout_s

    async def __aenter__(self) -> JobEngine:
        await self.worker.start()
        try:
            await self.maintenance.start()
        except BaseException:
            await self.worker.stop(self._stop_timeout_s)
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.maintenance.stop(self._stop_timeout_s)
        await self.worker.stop(self._stop_timeout_s)

    async def run_until_signal(
        self, signals: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)
    ) -> int:
        """Serve until one of `signals` arrives; returns its number. The handlers that were there
        before come back on the way out, so a second signal acts as it would have before."""
        loop = asyncio.get_running_loop()
        received: asyncio.Future[int] = loop.create_future()

        def on_signal(number: int) -> None:
            if not received.done():
                received.set_result(number)

        previous = {sig: signal.getsignal(sig) for sig in signals}
        for sig in signals:
            loop.add_signal_handler(sig, on_signal, int(sig))
        try:
            return await received
        finally:
            for sig, handler in previous.items():
                loop.remove_signal_handler(sig)
                # remove_signal_handler leaves the default behind; the caller's own handler comes back.
                signal.signal(sig, handler)
