"""Webhook deliveries per second to a local receiver answering in 50 ms, with 1 and 2 worker processes.

    .venv/bin/python bench/webhooks.py [--deliveries 4000] [--endpoints 8] [--hang]

For each process count: a fresh database, `paymanager sandbox merchant --delay-ms 50` in its own
process, N headless `paymanager run` processes (role outbox-worker), then a backlog of deliveries
written in one transaction (events through `webhook_enqueue`, as a status change writes them); the
figure is deliveries succeeded per second from that commit until the last one succeeded. With
`--hang`, one more endpoint whose receiver hangs gets a delivery of every event too: the others'
rate shows what it costs them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from costs import Costs, Profile, RunCosts, enable_statements
from paymanager.adapters.secret_box import SecretBox
from paymanager.application.services.use_cases import create_service
from paymanager.application.webhooks.address_guard import AddressGuard
from paymanager.application.webhooks.endpoints import NewEndpoint, create_endpoint
from paymanager.db import migrations
from paymanager.db.pool import create_pool

SERVER = os.environ.get("TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
RECEIVER_PORT = 28_099
HANG_PORT = 28_098


def database_url(name: str) -> str:
    parts = urlsplit(SERVER)
    return urlunsplit(parts._replace(path="/" + name))


def spawn(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "paymanager", *args], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip


async def wait_port(port: int) -> None:
    for _ in range(200):
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return
        except OSError:
            await asyncio.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


async def run(
    processes: int, deliveries: int, endpoints: int, hang: bool, profile: str | None
) -> tuple[float, Costs]:
    name = f"bench_webhooks_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(SERVER)
    await admin.execute(f'CREATE DATABASE "{name}"')
    url = database_url(name)
    children: list[subprocess.Popen[bytes]] = []
    try:
        pool = await create_pool(url, min_size=1, max_size=4)
        async with pool.acquire() as conn:
            await migrations.migrate(conn)
            await enable_statements(conn)
            box = SecretBox.from_config(None)
            service, _ = await create_service(conn, box, "bench", admin=False)
            guard = AddressGuard(["127.0.0.1"])
            now = datetime.now(UTC)
            for index in range(endpoints):
                wanted = NewEndpoint(f"http://127.0.0.1:{RECEIVER_PORT}/e{index}", ["*"], None)
                await create_endpoint(conn, box, guard, service.id, wanted, now)
            if hang:
                wanted = NewEndpoint(f"http://127.0.0.1:{HANG_PORT}/hang", ["*"], None)
                await create_endpoint(conn, box, guard, service.id, wanted, now)
        env = {
            **os.environ, "DATABASE_URL": url, "LOG_LEVEL": "warning", "WEBHOOK_ALLOWED_HOSTS": "127.0.0.1",
            "WEBHOOK_CONCURRENCY": "128", "WEBHOOK_ENDPOINT_CONCURRENCY": "32", "DB_POOL_MAX_SIZE": "10",
        }  # fmt: skip
        receiver = spawn(["sandbox", "merchant", "--port", str(RECEIVER_PORT), "--delay-ms", "50"], env)
        children.append(receiver)
        if hang:
            children.append(spawn(["sandbox", "merchant", "--port", str(HANG_PORT), "--mode", "hang"], env))
        await wait_port(RECEIVER_PORT)
        workers = [spawn(["run"], {**env, "WORKER_ROLES": "outbox-worker"}) for _ in range(processes)]
        children.extend(workers)
        async with pool.acquire() as conn:
            for _ in range(200):
                if await conn.fetchval("SELECT count(*) FROM process WHERE stopped_at IS NULL") >= processes:
                    break
                await asyncio.sleep(0.1)
            events = deliveries // endpoints
            groups = {"workers": [w.pid for w in workers], "receiver": [receiver.pid], "bench": [os.getpid()]}
            costs = RunCosts(conn, groups)
            await costs.start()
            spy = Profile(workers[0].pid, profile)
            spy.__enter__()
            started = time.perf_counter()
            await conn.execute(
                "SELECT webhook_enqueue($1, 'intent.settled', jsonb_build_object('n', g), now())"
                " FROM generate_series(1, $2) AS g",
                service.id, events,
            )  # fmt: skip
            target = events * endpoints
            while True:
                done = await conn.fetchval(
                    "SELECT count(*) FROM webhook_delivery WHERE status = 'succeeded' AND endpoint_id IN"
                    " (SELECT id FROM webhook_endpoint WHERE url LIKE $1)",
                    f"%:{RECEIVER_PORT}/%",
                )
                if done >= target:
                    break
                await asyncio.sleep(0.02)
            elapsed = time.perf_counter() - started
            spy.__exit__()
            measured = await costs.stop()
            if os.environ.get("BENCH_DETAILS"):  # where the time went: receiver latency, job durations
                print(
                    await conn.fetchrow(
                        "SELECT avg(last_latency_ms), max(last_latency_ms), avg(attempts)"
                        " FROM webhook_delivery"
                    )
                )
                print(
                    await conn.fetchrow(
                        "SELECT avg(extract(epoch FROM finalized_at - attempted_at)), count(*),"
                        " sum(attempt) FROM job WHERE queue = 'webhooks'"
                    )
                )
        await pool.close()
        return target / elapsed, measured
    finally:
        for child in children:
            child.terminate()
        for child in children:
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--deliveries", type=int, default=4_000)
    parser.add_argument("--endpoints", type=int, default=8)
    parser.add_argument("--hang", action="store_true", help="add an endpoint whose receiver hangs")
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--statements", action="store_true", help="print the statements per delivery")
    parser.add_argument("--profile", help="py-spy the first worker into FILE.<processes> (collapsed stacks)")
    args = parser.parse_args()
    for processes in args.processes:
        profile = f"{args.profile}.{processes}" if args.profile else None
        rate, costs = asyncio.run(run(processes, args.deliveries, args.endpoints, args.hang, profile))
        print(f"processes={processes} deliveries={args.deliveries} endpoints={args.endpoints} "
              f"hang={args.hang} receiver_delay_ms=50: {rate:,.0f} deliveries/s, "
              f"load {os.getloadavg()[0]:.1f}")  # fmt: skip
        print(costs.report(args.deliveries // args.endpoints * args.endpoints, "delivery"))
        if args.statements:
            print(costs.report_statements(args.deliveries // args.endpoints * args.endpoints))


if __name__ == "__main__":
    main()
