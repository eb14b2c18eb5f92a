"""A job worker process for crash tests: `python -m tests.support.job_worker DSN [options]`.

It serves queue `crash` with handlers that record each execution in table `execution` in the same
transaction as the job's fenced completion, and runs the maintenance service (rescuer) too, as every
production worker process may. It prints `ready` once started, and on SIGTERM stops within
`--shutdown-timeout-s` (releasing unfinished jobs) and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys

from paymanager.db.pool import create_pool
from paymanager.jobs import JobContext, MaintenanceOptions, Registry, Worker, WorkerOptions
from paymanager.jobs.maintenance import Maintenance
from paymanager.logging import configure_logging

EXECUTION_TABLE = "CREATE TABLE IF NOT EXISTS execution (job_id bigint NOT NULL, pid integer NOT NULL)"


def build_registry() -> Registry:
    registry = Registry()

    @registry.handler("record", queue="crash")
    async def record(ctx: JobContext) -> None:
        await asyncio.sleep(float(ctx.payload.get("sleep_s", 0)))
        async with ctx.transaction() as conn:
            await conn.execute("INSERT INTO execution (job_id, pid) VALUES ($1, $2)", ctx.id, os.getpid())

    return registry


async def main(args: argparse.Namespace) -> None:
    # The worker pins three pooled connections (two claims in flight, the completer); the rest serve
    # the handlers' transactions. Small, because max_connections is shared by every test.
    pool = await create_pool(args.dsn, min_size=1, max_size=7)
    await pool.execute(EXECUTION_TABLE)
    options = WorkerOptions(
        owner=f"crash-{os.getpid()}",
        lease_ms=args.lease_ms,
        heartbeat_interval_ms=args.lease_ms // 4,
        poll_interval_ms=200,
    )
    worker = Worker(pool, args.dsn, build_registry(), {"crash": args.concurrency}, options)
    maintenance = Maintenance(
        pool, args.dsn, MaintenanceOptions(rescue_interval_ms=100, election_interval_ms=100, max_stalled=5)
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await maintenance.start()
    await worker.start()
    print("ready", flush=True)
    await stop.wait()
    await worker.stop(args.shutdown_timeout_s)
    await maintenance.stop(1)
    await pool.close()
    print("stopped", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("dsn")
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--lease-ms", type=int, default=1_000)
    parser.add_argument("--shutdown-timeout-s", type=float, default=1.0)
    configure_logging("warning", "json")
    asyncio.run(main(parser.parse_args()))
    sys.exit(0)
