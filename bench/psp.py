"""Payouts completed per second through the sandbox PSP, with 1 and 2 psp-worker processes.

    .venv/bin/python bench/psp.py [--payouts 2000] [--latency-ms 20] [--workers 1 2] [--concurrency 256]

For each worker count: a fresh database, the sandbox PSP (IPPS dialect; `paymanager sandbox psp` in
its own process, so its CPU is neither the workers' nor this script's) answering every call after
`--latency-ms`, payers funded and payouts confirmed while the `psp.ipps` queue is
paused, then the psp-worker processes started, the queue resumed, and the time from the resume to the
last intent settled measured. Each payout is two PSP calls (the beneficiary check, the transfer),
each waiting the latency, so one worker must keep many payouts in flight (PSP_CONCURRENCY). The run
checks that the sandbox received exactly one transfer per payout, and prints the CPU milliseconds
per payout of each process (workers, sandbox, this script, and the PostgreSQL backends of each) and
the statements, transactions and WAL bytes per payout (bench/costs.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter

import asyncpg
import httpx

from costs import Profile, RunCosts, enable_statements
from paymanager import bootstrap
from paymanager.application.accounts.use_cases import OpenAccount, open_account
from paymanager.application.intents import events
from paymanager.application.intents.confirm import confirm_intent
from paymanager.application.intents.create import IntentRequest, create_intent
from paymanager.application.intents.settle import settle
from paymanager.application.psp.config import set_config
from paymanager.application.services.use_cases import create_service
from paymanager.config import Settings
from paymanager.db import migrations
from paymanager.db.database import Database
from paymanager.db.pool import create_pool
from paymanager.domain.channels import AccountKind
from paymanager.jobs.admin import pause_queue, resume_queue
from paymanager.sandbox.psp import config_for

SERVER = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432")
PAYERS = 64
WAIT_SAMPLE_S = 0.01


async def fresh_database() -> str:
    name = f"bench_psp_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(f"{SERVER}/postgres")
    await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    url = f"{SERVER}/{name}"
    conn = await asyncpg.connect(url)
    await migrations.migrate(conn)
    await enable_statements(conn)
    await conn.close()
    return url


async def sample_waits(url: str, stop: asyncio.Event) -> tuple[int, Counter[str]]:
    """What the bench database's backends do, every WAIT_SAMPLE_S until `stop`: samples taken and, per
    state or wait event (and per statement waiting on a lock), the backends seen in it."""
    seen: Counter[str] = Counter()
    taken = 0
    conn = await asyncpg.connect(url)
    try:
        while not stop.is_set():
            rows = await conn.fetch(
                "SELECT state, wait_event_type, wait_event, left(query, 60) AS q FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                " AND backend_type = 'client backend'"
            )
            taken += 1
            for row in rows:
                if row["state"] != "active":
                    seen[f"{row['state']}"] += 1
                    continue
                seen[f"active {row['wait_event_type'] or 'CPU'}:{row['wait_event'] or '-'}"] += 1
                if row["wait_event_type"] == "Lock":
                    seen[f"  lock wait in: {' '.join(row['q'].split())}"] += 1
            await asyncio.sleep(WAIT_SAMPLE_S)
    finally:
        await conn.close()
    return taken, seen


def report_waits(taken: int, seen: Counter[str]) -> str:
    lines = [f"    {count / max(taken, 1):6.2f}  {what}" for what, count in seen.most_common(14)]
    return f"  backends per sample ({taken} samples), by state and wait event:\n" + "\n".join(lines)


async def drop(url: str) -> None:
    admin = await asyncpg.connect(f"{SERVER}/postgres")
    await admin.execute(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)')
    await admin.close()


async def prepare(url: str, sandbox_url: str, payouts: int) -> None:
    """Payers funded and `payouts` ipps-transfers confirmed, their jobs waiting in a paused queue."""
    pool = await create_pool(url, min_size=1, max_size=4)
    settings = Settings(database_url=url, redis_url=None, worker_roles="api")  # type: ignore[arg-type]
    components = await bootstrap.build(
        settings, Database(url, pool), process_id="bench", reconcile_intents=False
    )
    payments = components.payments
    await set_config(pool, payments.box, "ipps", json.dumps(config_for("ipps", sandbox_url)).encode())
    async with pool.acquire() as conn:
        await pause_queue(conn, "psp.ipps")
        admin, _ = await create_service(conn, payments.box, "bench-admin", admin=True)
        shop, _ = await create_service(conn, payments.box, "bench-shop", admin=False)
    payers = []
    for _ in range(PAYERS):
        async with pool.acquire() as conn, conn.transaction():
            account = await open_account(payments, conn, shop, OpenAccount(AccountKind.USER, "THB"))
            funding = await create_intent(payments, conn, admin, IntentRequest(
                "admin-transfer", 10_000_000_000, "THB", payee_account_id=account.id), [])  # fmt: skip
            await confirm_intent(payments, conn, admin, funding.id, events.Pending())
        async with pool.acquire() as conn, conn.transaction():
            await settle(payments, conn, funding.id, settled_by="bench")
        payers.append(account.id)
    for n in range(payouts):
        async with pool.acquire() as conn, conn.transaction():
            intent = await create_intent(payments, conn, shop, IntentRequest(
                "ipps-transfer", 1_000 + n, "THB", payer_account_id=payers[n % PAYERS],
                metadata={"beneficiary_account": f"{n:010d}"}), [])  # fmt: skip
            await confirm_intent(payments, conn, shop, intent.id, events.Pending())
    await components.close()
    await pool.close()


def start_worker(url: str, concurrency: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DATABASE_URL": url, "WORKER_ROLES": "psp-worker", "PSP_NAMES": "ipps",
           "PSP_CONCURRENCY": str(concurrency), "LOG_LEVEL": "warning", "DB_POOL_MAX_SIZE": "20",
           "PSP_POLL_INTERVAL_MS": "100"}  # fmt: skip
    return subprocess.Popen([sys.executable, "-m", "paymanager", "run"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip


# Payouts still on their way: confirmed, and not parked in MANUAL_REVIEW.
UNFINISHED = """
SELECT count(*) FROM intent AS i
 WHERE i.channel = 'ipps-transfer' AND i.status = 'confirmed'
   AND NOT EXISTS (SELECT 1 FROM psp_tx AS t WHERE t.intent_id = i.id AND t.state = 'MANUAL_REVIEW')
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def spawn_sandbox(port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "paymanager", "sandbox", "psp", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip


async def start_sandbox() -> tuple[str, subprocess.Popen[bytes]]:
    port = free_port()
    proc = spawn_sandbox(port)
    url = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient() as http:
        for _ in range(600):
            try:
                (await http.get(f"{url}/admin/submissions")).raise_for_status()
                return url, proc
            except httpx.HTTPError:
                await asyncio.sleep(0.1)
    proc.terminate()
    raise RuntimeError("the PSP sandbox did not start")


async def one_run(
    workers: int, payouts: int, latency_ms: int, concurrency: int, profile: str | None, statements: bool,
    waits: bool,
) -> dict[str, object]:  # fmt: skip
    sandbox_url, sandbox = await start_sandbox()
    async with httpx.AsyncClient() as http:
        (await http.post(f"{sandbox_url}/admin/faults", json={"latency_ms": latency_ms})).raise_for_status()
    url = await fresh_database()
    procs = []
    try:
        await prepare(url, sandbox_url, payouts)
        procs = [start_worker(url, concurrency) for _ in range(workers)]
        conn = await asyncpg.connect(url)
        while await conn.fetchval("SELECT count(*) FROM process WHERE stopped_at IS NULL") < workers:  # noqa: ASYNC110 - polls the database; no event exists
            await asyncio.sleep(0.1)
        await asyncio.sleep(1)  # every worker's claim loop running
        groups = {"workers": [p.pid for p in procs], "sandbox": [sandbox.pid], "bench": [os.getpid()]}
        costs = RunCosts(conn, groups)
        await costs.start()
        stop_sampling = asyncio.Event()
        sampler = asyncio.create_task(sample_waits(url, stop_sampling)) if waits else None
        started = time.perf_counter()
        await resume_queue(conn, "psp.ipps")
        with Profile(procs[0].pid, profile):
            # A payout the PSP left ambiguous past its retries waits in MANUAL_REVIEW for an operator:
            # it ends the run (reported below), it is not waited for.
            while await conn.fetchval(UNFINISHED):  # noqa: ASYNC110 - polls the database
                await asyncio.sleep(0.05)
        seconds = time.perf_counter() - started
        stop_sampling.set()
        measured = await costs.stop()
        print(measured.report(payouts, "payout"))
        if statements:
            print(measured.report_statements(payouts))
        if sampler is not None:
            print(report_waits(*await sampler))
        settled = await conn.fetchval(
            "SELECT count(*) FROM intent WHERE channel = 'ipps-transfer' AND status = 'settled'"
        )
        in_review = await conn.fetchval("SELECT count(*) FROM psp_tx WHERE state = 'MANUAL_REVIEW'")
        await conn.close()
        async with httpx.AsyncClient() as http:
            submissions = (await http.get(f"{sandbox_url}/admin/submissions")).json()
        print(f"  load {os.getloadavg()[0]:.1f}")
        return {
            "workers": workers, "payouts": payouts, "settled": settled, "seconds": round(seconds, 2),
            "payouts_per_s": round(payouts / seconds, 1), "submissions": sum(submissions.values()),
            "max_per_tx": max(submissions.values()), "manual_review": in_review,
        }  # fmt: skip
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=60)
        sandbox.terminate()
        sandbox.wait(timeout=30)
        await drop(url)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--payouts", type=int, default=2_000)
    parser.add_argument("--latency-ms", type=int, default=20)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--statements", action="store_true", help="print the statements per payout")
    parser.add_argument("--profile", help="py-spy the first worker into FILE.<workers> (collapsed stacks)")
    parser.add_argument(
        "--waits", action="store_true", help="sample what the database's backends wait on during the run"
    )
    args = parser.parse_args()
    for workers in args.workers:
        profile = f"{args.profile}.{workers}" if args.profile else None
        result = await one_run(
            workers, args.payouts, args.latency_ms, args.concurrency, profile, args.statements, args.waits
        )
        print(json.dumps(result))


if __name__ == "__main__":
    asyncio.run(main())
