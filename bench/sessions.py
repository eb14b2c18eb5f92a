"""Checkout sessions: completed two-leg sessions per second with slow providers.

Run: `.venv/bin/python bench/sessions.py [--count 2000] [--latency-ms 20]` (PostgreSQL at
BENCH_DATABASE_URL, default localhost:5432; a fresh database is created and dropped).

Printed, all in one run on this machine:
1. engine baseline: 2 `outbox-worker` processes draining N x 3 no-op session jobs with the same
   queue and concurrency (jobs/s; what the engine gives these workers with providers that cost nothing);
2. sessions: the same 2 processes draining a backlog of N confirmed sessions (a gift card of 40% and a
   card of 60%), each a DEBIT_GIFT and an AUTHORIZE_PSP in parallel, then the completion (ledger,
   event) and a CAPTURE_PSP, against the gift-card and card sandboxes (each its own process, real
   HTTP) answering after `--latency-ms`: completed sessions/s, and its jobs/s as a ratio to (1);
3. the same at 0 ms provider latency, for what the latency costs.
The goal of issue 17: >= 300 completed sessions/s at 20 ms with 2 worker processes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import asyncpg
import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.processes import PaymanagerProcess, free_port, paymanager_env  # noqa: E402

from costs import Costs, Profile, RunCosts, enable_statements  # noqa: E402
from paymanager import bootstrap  # noqa: E402
from paymanager.application.accounts.use_cases import OpenAccount, open_account  # noqa: E402
from paymanager.application.services.use_cases import ServiceIdentity, create_service  # noqa: E402
from paymanager.application.sessions.context import Sessions  # noqa: E402
from paymanager.application.sessions.outbox import SESSION_QUEUE  # noqa: E402
from paymanager.application.sessions.use_cases import SessionRequest, confirm_session, create_session  # noqa: E402
from paymanager.config import Settings  # noqa: E402
from paymanager.db import migrations  # noqa: E402
from paymanager.db.database import Database  # noqa: E402
from paymanager.db.pool import create_pool  # noqa: E402
from paymanager.domain.channels import AccountKind  # noqa: E402
from paymanager.domain.sessions import LegKind, LegRequest  # noqa: E402
from paymanager.jobs import NewJob, admin, enqueue_many  # noqa: E402

SERVER = os.environ.get("BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
BATCH = 100
AMOUNT = 1_000
CONCURRENCY = int(os.environ.get("BENCH_SESSION_CONCURRENCY", "64"))


def with_db(url: str, name: str) -> str:
    return url.rsplit("/", 1)[0] + "/" + name


async def make_database() -> str:
    name = f"pm_bench_{uuid.uuid4().hex[:8]}"
    conn = await asyncpg.connect(SERVER)
    await conn.execute(f'CREATE DATABASE "{name}"')
    await conn.close()
    url = with_db(SERVER, name)
    conn = await asyncpg.connect(url)
    await migrations.migrate(conn)
    await enable_statements(conn)
    await conn.close()
    return url


async def drop_database(url: str) -> None:
    conn = await asyncpg.connect(SERVER)
    await conn.execute(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)')
    await conn.close()


class Sandbox:
    """A sandbox served by `paymanager sandbox KIND` in its own process."""

    def __init__(self, kind: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "paymanager", "sandbox", kind, "--port", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 120
        while True:
            try:
                httpx.get(f"{self.url}/_sandbox/faults", timeout=1)
                return
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"the {kind} sandbox did not start") from None
                time.sleep(0.1)

    def requests(self) -> int:
        """Provider calls served (the sandbox's counters: submissions of each operation)."""
        counters = httpx.get(f"{self.url}/_sandbox/counters", timeout=30).json()
        return sum(
            n for card in counters.values() for name, n in card.items() if name.endswith("submissions")
        )

    def post(self, path: str, body: object) -> None:
        response = httpx.post(f"{self.url}{path}", json=body, timeout=30)
        response.raise_for_status()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def workers(url: str, gift: Sandbox, card: Sandbox, n: int) -> list[PaymanagerProcess]:
    env = paymanager_env(
        url,
        WORKER_ROLES="outbox-worker",
        # info: the start-up line says when the worker is ready; nothing is logged per job.
        LOG_LEVEL="info",
        SESSIONS_ENABLED="true",
        GIFTCARD_BASE_URL=gift.url,
        CARD_BASE_URL=card.url,
        SESSION_ACTION_CONCURRENCY=str(CONCURRENCY),
        OUTBOX_BATCH_SIZE=str(BATCH),
        OUTBOX_INTERVAL_MS="50",
        DB_POOL_MAX_SIZE="16",
    )
    return [PaymanagerProcess(env) for _ in range(n)]


def stop(processes: list[PaymanagerProcess]) -> None:
    for p in processes:
        p.terminate()
        p.close()


async def setup(
    url: str, gift: Sandbox, card: Sandbox
) -> tuple[Sessions, ServiceIdentity, uuid.UUID, asyncpg.Pool]:
    pool = await create_pool(url, min_size=1, max_size=10)
    settings = Settings(
        database_url=url, worker_roles="api", sessions_enabled=True, giftcard_base_url=gift.url,
        card_base_url=card.url,
    )  # fmt: skip
    components = await bootstrap.build(
        settings, Database(url, pool), process_id="bench", reconcile_intents=False
    )
    assert components.sessions is not None
    async with pool.acquire() as conn, conn.transaction():
        shop, _ = await create_service(conn, components.payments.box, "bench-shop", admin=False)
        merchant = await open_account(
            components.payments, conn, shop, OpenAccount(AccountKind.MERCHANT, "THB")
        )
    return components.sessions, shop, merchant.id, pool


async def backlog(
    sessions: Sessions, shop: ServiceIdentity, merchant: uuid.UUID, gift: Sandbox, n: int
) -> None:
    """`n` confirmed two-leg sessions, their actions queued (the queue is paused meanwhile)."""
    tag = uuid.uuid4().hex[:6]
    gift.post("/_sandbox/cards", {"cards": [{"card": f"GC{tag}{i}", "balance": AMOUNT} for i in range(n)]})
    for start in range(0, n, BATCH):
        async with sessions.payments.pool.acquire() as conn, conn.transaction():
            for i in range(start, min(n, start + BATCH)):
                legs = [
                    LegRequest(LegKind.GIFT_CARD, 400, f"GC{tag}{i}"),
                    LegRequest(LegKind.CARD, 600, f"tok{i}"),
                ]
                session, _ = await create_session(
                    sessions, conn, shop, SessionRequest(merchant, AMOUNT, "THB", legs)
                )
                await confirm_session(sessions, conn, shop, session.id)


async def count(pool: asyncpg.Pool, sql: str) -> int:
    return int(await pool.fetchval(sql))


async def drain(pool: asyncpg.Pool, sql: str, target: int, timeout_s: float = 600) -> float:
    """Resume the paused queue and time until `sql` counts `target`."""
    async with pool.acquire() as conn:
        await admin.resume_queue(conn, SESSION_QUEUE)
    started = time.perf_counter()
    while await count(pool, sql) < target:
        if time.perf_counter() - started > timeout_s:
            raise TimeoutError(f"not drained within {timeout_s} s")
        await asyncio.sleep(0.02)
    return time.perf_counter() - started


async def pause(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        await admin.pause_queue(conn, SESSION_QUEUE)


def cpu_seconds(procs: list[PaymanagerProcess]) -> float:
    times = [psutil.Process(p.proc.pid).cpu_times() for p in procs]
    return sum(t.user + t.system for t in times)


def wait_started(procs: list[PaymanagerProcess]) -> None:
    for p in procs:
        p.wait_for_line("started in headless mode", timeout_s=60)


async def baseline(url: str, pool: asyncpg.Pool, gift: Sandbox, card: Sandbox, jobs: int) -> float:
    """No-op jobs of a kind the session workers serve on their queue: CAPTURE_PSP of a leg that does
    not exist ends at once (a PermanentError), so each costs a claim, two reads and a completion."""
    await pause(pool)
    async with pool.acquire() as conn:
        await enqueue_many(
            conn,
            [NewJob("CAPTURE_PSP", {"leg_id": str(uuid.uuid4())}, queue=SESSION_QUEUE) for _ in range(jobs)],
        )
    procs = workers(url, gift, card, 2)
    try:
        wait_started(procs)
        seconds = await drain(
            pool,
            "SELECT count(*) FROM job WHERE kind = 'CAPTURE_PSP' AND state IN ('dead', 'completed')",
            jobs,
        )
    finally:
        stop(procs)
    await pool.execute("DELETE FROM job WHERE kind = 'CAPTURE_PSP'")
    return jobs / seconds


Parts = tuple[Sessions, ServiceIdentity, uuid.UUID]


async def sessions_phase(
    url: str,
    pool: asyncpg.Pool,
    parts: Parts,
    gift: Sandbox,
    card: Sandbox,
    n: int,
    latency_ms: int,
    profile: str | None = None,
) -> tuple[float, float, Costs, int]:
    """Completed sessions/s, the workers' cores, the run's costs and the provider calls made."""
    for sandbox in (gift, card):
        sandbox.post("/_sandbox/faults", {"latency_ms": latency_ms})
    await pause(pool)
    done_before = await count(pool, "SELECT count(*) FROM checkout_session WHERE status = 'completed'")
    await backlog(*parts, gift, n)
    calls_before = gift.requests() + card.requests()
    procs = workers(url, gift, card, 2)
    try:
        wait_started(procs)
        groups = {
            "workers": [p.proc.pid for p in procs],
            "giftcard": [gift.proc.pid],
            "card": [card.proc.pid],
            "bench": [os.getpid()],
        }
        async with pool.acquire() as conn:
            costs = RunCosts(conn, groups)
            await costs.start()
            cpu = cpu_seconds(procs)
            with Profile(procs[0].proc.pid, profile):
                seconds = await drain(
                    pool, "SELECT count(*) FROM checkout_session WHERE status = 'completed'", done_before + n
                )
            cores = (cpu_seconds(procs) - cpu) / seconds
            measured = await costs.stop()
    finally:
        stop(procs)
    calls = gift.requests() + card.requests() - calls_before
    return n / seconds, cores, measured, calls


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=2_000, help="Sessions per phase.")
    parser.add_argument("--latency-ms", type=int, default=20, help="Provider latency of phase 2.")
    parser.add_argument("--statements", action="store_true", help="Print phase 2's statements per session.")
    parser.add_argument("--profile", help="py-spy one worker of phase 2 into this file (collapsed stacks).")
    parser.add_argument("--skip-baseline", action="store_true", help="Skip phase 1 (the no-op engine).")
    parser.add_argument("--skip-zero", action="store_true", help="Skip phase 3 (0 ms providers).")
    args = parser.parse_args()
    url = await make_database()
    gift = Sandbox("giftcard")
    try:
        card = Sandbox("card")
    except RuntimeError:
        gift.stop()
        raise
    try:
        sessions, shop, merchant, pool = await setup(url, gift, card)
        if args.skip_baseline:
            jobs_rate = float("nan")
        else:
            jobs_rate = await baseline(url, pool, gift, card, args.count * 3)
            print(
                f"1. engine baseline, 2 outbox-worker processes, no-op session jobs: {jobs_rate:8.0f} jobs/s"
            )
        rate, cores, costs, calls = await sessions_phase(
            url, pool, (sessions, shop, merchant), gift, card, args.count, args.latency_ms, args.profile
        )
        print(
            f"2. sessions, 2 outbox-worker processes, {args.latency_ms} ms providers,"
            f" backlog of {args.count}:"
            f" {rate:8.0f} completed sessions/s ({3 * rate / jobs_rate:.2f} x baseline in jobs/s);"
            f" workers {cores:.2f} cores, load {os.getloadavg()[0]:.1f} of {psutil.cpu_count()} cores"
        )
        print(costs.report(args.count, "session") + f", {calls / args.count:.1f} provider calls")
        if args.statements:
            print(costs.report_statements(args.count))
        if not args.skip_zero:
            rate0, cores0, costs0, calls0 = await sessions_phase(
                url, pool, (sessions, shop, merchant), gift, card, args.count, 0
            )
            print(
                f"3. sessions, 2 outbox-worker processes,  0 ms providers, backlog of {args.count}:"
                f" {rate0:8.0f} completed sessions/s ({3 * rate0 / jobs_rate:.2f} x baseline in jobs/s);"
                f" workers {cores0:.2f} cores, load {os.getloadavg()[0]:.1f}"
            )
            print(costs0.report(args.count, "session") + f", {calls0 / args.count:.1f} provider calls")
        await pool.close()
    finally:
        gift.stop()
        card.stop()
        await drop_database(url)


if __name__ == "__main__":
    asyncio.run(main())
