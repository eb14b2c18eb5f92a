"""Payment intents: how fast they settle, and the API's latency under rising load.

Run: `.venv/bin/python bench/intents.py` (PostgreSQL at BENCH_DATABASE_URL, default localhost:5432;
a fresh database is created and dropped). `--backend tigerbeetle [--count 2000 --rounds 3]` runs
phase 2 alone on both ledgers in the same run (a TigerBeetle replica of its own unless TB_ADDRESS
names one; see bench/ledger.py).

Printed, all in one run on this machine:
1. engine baseline: one in-process job Worker draining N no-op outbox jobs (jobs/s);
2. settlement, same worker: draining N confirmed intents with the real `intent.settle` handler
   (ledger post, settlement row, status, NOTIFY, fenced completion), and its ratio to (1);
3. settlement, 2 `outbox-worker` processes draining a backlog of N confirmed intents (settled/s);
4. end to end: an `api` process and 2 `outbox-worker` processes; p2p create + confirm sent open-loop
   at rising request rates for a few seconds each; API latency p50/p99 and settled intents/s.
5. with `--ab REF`: the api of git ref REF (the baseline) against this tree's, interleaved in the same
   run with the same 2 `outbox-worker` processes: closed loop (10 clients) and open loop at
   `--ab-rate`, round after round in alternating order, with the load average of each round.
   `--only-ab` skips phases 1-4.
6. with `--saturation START:STOP`: the saturation point (the highest rate whose p99 stays under 25 ms
   with no failed request) with 1 and then 2 `api` processes beside 2 `outbox-worker` processes,
   rates rising a quarter at a time from START to STOP; `--only-saturation` runs it alone.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.http_load import intents_open_loop, open_loop  # noqa: E402
from tests.support.processes import PaymanagerProcess, free_port, paymanager_env  # noqa: E402
from tests.support.signed_client import SignedClient  # noqa: E402

from paymanager import bootstrap  # noqa: E402
from paymanager.application.accounts.use_cases import OpenAccount, open_account  # noqa: E402
from paymanager.application.context import Payments  # noqa: E402
from paymanager.application.intents.confirm import OUTBOX_QUEUE, SETTLE_KIND, confirm_intent  # noqa: E402
from paymanager.application.intents.create import IntentRequest, create_intent  # noqa: E402
from paymanager.application.intents.events import Pending  # noqa: E402
from paymanager.application.intents.settle import settle, settle_handler  # noqa: E402
from paymanager.application.services.use_cases import (  # noqa: E402
    REQUESTS_PER_SEC_MAX,
    ServiceIdentity,
    create_service,
    set_rate_limit,
)
from paymanager.config import Settings  # noqa: E402
from paymanager.db import migrations  # noqa: E402
from paymanager.db.database import Database  # noqa: E402
from paymanager.db.pool import create_pool  # noqa: E402
from paymanager.domain.channels import AccountKind  # noqa: E402
from paymanager.jobs import JobContext, NewJob, Registry, Worker, WorkerOptions, enqueue_many  # noqa: E402

SERVER = os.environ.get("BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
PAIRS = 200
FUNDING = 10**12
CONCURRENCY = 50
BATCH = 100
LOADGEN = "raw"  # --loadgen: "raw" (bench/http_load.py, own process) or "httpx" (in this process)


def with_db(url: str, name: str) -> str:
    return url.rsplit("/", 1)[0] + "/" + name


async def make_database() -> str:
    name = f"pm_bench_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(SERVER)
    await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    url = with_db(SERVER, name)
    conn = await asyncpg.connect(url)
    await migrations.migrate(conn)
    await conn.close()
    return url


async def drop_database(url: str) -> None:
    admin = await asyncpg.connect(SERVER)
    await admin.execute(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)')
    await admin.close()


class Setup:
    def __init__(
        self,
        components: bootstrap.Components,
        admin: ServiceIdentity,
        admin_secret: str,
        shop: ServiceIdentity,
        shop_secret: str,
        pairs: list[tuple[uuid.UUID, uuid.UUID]],
    ) -> None:
        self.components, self.admin, self.admin_secret = components, admin, admin_secret
        self.shop, self.shop_secret, self.pairs = shop, shop_secret, pairs

    @property
    def payments(self) -> Payments:
        return self.components.payments


async def setup(url: str, **settings: Any) -> Setup:
    pool = await create_pool(url, min_size=1, max_size=10)
    components = await bootstrap.build(
        Settings(database_url=url, **settings),
        Database(url, pool),
        process_id="bench",
        reconcile_intents=False,
    )
    payments = components.payments
    async with pool.acquire() as conn, conn.transaction():
        admin, admin_secret = await create_service(conn, payments.box, "bench-admin", admin=True)
        shop, shop_secret = await create_service(conn, payments.box, "bench-shop", admin=False)
        pairs = []
        for _ in range(PAIRS):
            payer = (await open_account(payments, conn, shop, OpenAccount(AccountKind.USER, "THB"))).id
            payee = (await open_account(payments, conn, shop, OpenAccount(AccountKind.USER, "THB"))).id
            top_up = await create_intent(
                payments,
                conn,
                admin,
                IntentRequest("admin-transfer", FUNDING, "THB", payee_account_id=payer),
                [],
            )
            await confirm_intent(payments, conn, admin, top_up.id, Pending())
            await settle(payments, conn, top_up.id, settled_by="bench")
            pairs.append((payer, payee))
    # The top-ups were settled inline; their queued jobs would only be no-ops.
    await pool.execute("DELETE FROM job")
    return Setup(components, admin, admin_secret, shop, shop_secret, pairs)


async def backlog(s: Setup, count: int) -> None:
    """`count` confirmed p2p intents, each with its settlement job queued."""
    payments = s.payments
    for start in range(0, count, BATCH):
        async with payments.pool.acquire() as conn, conn.transaction():
            for i in range(start, min(count, start + BATCH)):
                payer, payee = s.pairs[i % len(s.pairs)]
                row = await create_intent(
                    payments, conn, s.shop, IntentRequest("internal-p2p", 100, "THB", payer, payee), []
                )
                await confirm_intent(payments, conn, s.shop, row.id, Pending())


async def count_jobs_done(pool: asyncpg.Pool) -> int:
    return int(await pool.fetchval("SELECT count(*) FROM job WHERE state = 'completed'"))


async def settled(pool: asyncpg.Pool) -> int:
    return int(
        await pool.fetchval(
            "SELECT count(*) FROM intent WHERE channel = 'internal-p2p' AND status = 'settled'"
        )
    )


async def drain(pool: asyncpg.Pool, target: int, counter: Any, timeout_s: float = 300) -> float:
    start = time.perf_counter()
    while await counter(pool) < target:
        if time.perf_counter() - start > timeout_s:
            raise TimeoutError(f"only {await counter(pool)} of {target} done after {timeout_s}s")
        await asyncio.sleep(0.02)
    return time.perf_counter() - start


async def in_process(s: Setup, count: int, handler: Any, jobs: list[NewJob] | None) -> float:
    pool = s.payments.pool
    registry = Registry()
    registry.register(SETTLE_KIND, handler, queue=OUTBOX_QUEUE)
    if jobs is not None:
        async with pool.acquire() as conn:
            await enqueue_many(conn, jobs)
    before = await count_jobs_done(pool)
    worker = Worker(
        pool,
        s.components.database,
        registry,
        {OUTBOX_QUEUE: CONCURRENCY},
        WorkerOptions(owner="bench", claim_batch_max=BATCH, poll_interval_ms=50),
    )
    await worker.start()
    seconds = await drain(pool, before + count, count_jobs_done)
    await worker.stop(10)
    return count / seconds


def workers(url: str, n: int, **extra: str) -> list[PaymanagerProcess]:
    """`n` outbox-worker processes, phase 3's settings (`extra` environment variables on top)."""
    env = paymanager_env(
        url,
        WORKER_ROLES="outbox-worker",
        LOG_LEVEL="warning",
        OUTBOX_BATCH_SIZE=str(BATCH),
        OUTBOX_CONCURRENCY=str(CONCURRENCY),
        OUTBOX_INTERVAL_MS="50",
        OUTBOX_CLAIM_COOLDOWN_MS=os.environ.get("BENCH_OUTBOX_CLAIM_COOLDOWN_MS", "25"),
        DB_POOL_MAX_SIZE="12",
    )
    env.update(extra)
    return [PaymanagerProcess(env) for _ in range(n)]


def stop(processes: list[PaymanagerProcess]) -> None:
    for p in processes:
        p.terminate()
        p.close()


async def end_to_end(
    s: Setup, url: str, rates: list[int], seconds: float, n_workers: int
) -> list[tuple[int, float, float, float, float, int]]:
    port = free_port()
    api = PaymanagerProcess(
        paymanager_env(
            url,
            WORKER_ROLES="api",
            PORT=str(port),
            HOST="127.0.0.1",
            LOG_LEVEL="warning",
            DB_POOL_MIN_SIZE="20",
            DB_POOL_MAX_SIZE="20",
        )
    )
    procs = workers(url, n_workers) if n_workers else []
    results = []
    try:
        await wait_http(port, api)
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", timeout=30, limits=httpx.Limits(max_connections=200)
        ) as http:
            client = SignedClient(http, s.shop.id, s.shop_secret)
            for rate in rates:
                results.append(await one_rate(s, client, rate, seconds, settle=bool(n_workers), port=port))
    finally:
        stop([api, *procs])
    return results


async def wait_http(port: int, process: PaymanagerProcess) -> None:
    async with httpx.AsyncClient() as http:
        for _ in range(1_200):
            if process.proc.poll() is not None:
                raise RuntimeError(f"the api process exited:\n{process.output[-3000:]}")
            try:
                if (await http.get(f"http://127.0.0.1:{port}/livez")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.1)
    raise TimeoutError(f"the api did not start:\n{process.output[-3000:]}")


async def one_rate(
    s: Setup, client: SignedClient, rate: int, seconds: float, *, settle: bool, port: int | None = None
) -> tuple[int, float, float, float, float, int]:
    """Open loop: an intent (create then confirm, two requests) starts every 2/rate seconds.

    With `port` and `--loadgen raw` (the default) the requests come from bench/http_load.py in a
    process of its own; else from `client` (httpx) in this process."""
    pool = s.payments.pool
    if port is not None and LOADGEN == "raw":
        before = await settled(pool)
        pairs = [(str(payer), str(payee)) for payer, payee in s.pairs]
        start = time.perf_counter()
        r = await intents_open_loop(port, s.shop.id, s.shop_secret, pairs, rate, seconds)
        if settle:
            await drain(pool, before + r.warmup_intents + r.intents, settled, timeout_s=120)
        elapsed = time.perf_counter() - start
        print(f"   (load generator: {r.generator_cpu_ms:.2f} ms CPU per request, in its own process)")
        return rate, r.achieved, r.p50_ms, r.p99_ms, (r.warmup_intents + r.intents) / elapsed, r.errors
    latencies: list[float] = []
    errors = 0
    before = await settled(pool)

    async def one(i: int) -> None:
        nonlocal errors
        payer, payee = s.pairs[i % len(s.pairs)]
        body = {
            "channel": "internal-p2p",
            "amount": 100,
            "currency": "THB",
            "payer_account_id": str(payer),
            "payee_account_id": str(payee),
            "description": f"bench {rate} {i}",
        }
        try:
            t0 = time.perf_counter()
            created = await client.post("/intents", body)
            latencies.append(time.perf_counter() - t0)
            if created.status_code != 201:
                errors += 1
                return
            t1 = time.perf_counter()
            confirmed = await client.post(f"/intents/{created.json()['id']}/confirm")
            latencies.append(time.perf_counter() - t1)
            errors += confirmed.status_code != 200
        except httpx.HTTPError:
            # A connection the overloaded server dropped: counted, not fatal to the benchmark.
            errors += 1

    intents = int(rate / 2 * seconds)
    start = time.perf_counter()
    sending = await open_loop(one, intents, rate / 2)
    if settle:
        await drain(pool, before + intents - errors, settled, timeout_s=120)
    elapsed = time.perf_counter() - start
    latencies.sort()
    p50 = statistics.median(latencies) * 1000
    p99 = latencies[int(len(latencies) * 0.99) - 1] * 1000
    achieved = len(latencies) / sending
    return rate, achieved, p50, p99, (intents - errors) / elapsed, errors


def export_tree(ref: str, into: Path) -> str:
    """The `src` of git ref `ref`, for an api process's PYTHONPATH. A ref whose dependencies do not
    include httptools gets a stand-in that fails to import, so its uvicorn parses HTTP with h11 as it
    did."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "src"], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    path = str(into / "src")
    pyproject = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{ref}:pyproject.toml"], check=True, capture_output=True, text=True
    ).stdout
    if "httptools" not in pyproject:
        (into / "no_httptools" / "httptools").mkdir(parents=True)
        (into / "no_httptools" / "httptools" / "__init__.py").write_text(
            "raise ImportError('not in ' + __name__)\n"
        )
        path = f"{into / 'no_httptools'}{os.pathsep}{path}"
    return path


async def closed_loop(
    s: Setup, client: SignedClient, clients: int, seconds: float
) -> tuple[int, float, list[float]]:
    """`clients` loops each sending create then confirm as fast as answered: requests answered, the
    seconds taken and the sorted latencies (failed requests are counted but not timed)."""
    latencies: list[float] = []
    stop_at = time.perf_counter() + seconds

    async def loop(k: int) -> None:
        i = k
        while time.perf_counter() < stop_at:
            payer, payee = s.pairs[i % len(s.pairs)]
            i += clients
            body = {"channel": "internal-p2p", "amount": 100, "currency": "THB",
                    "payer_account_id": str(payer), "payee_account_id": str(payee)}  # fmt: skip
            t0 = time.perf_counter()
            created = await client.post("/intents", body)
            latencies.append(time.perf_counter() - t0)
            if created.status_code != 201:
                raise RuntimeError(f"create answered {created.status_code}: {created.text}")
            t1 = time.perf_counter()
            confirmed = await client.post(f"/intents/{created.json()['id']}/confirm")
            latencies.append(time.perf_counter() - t1)
            if confirmed.status_code != 200:
                raise RuntimeError(f"confirm answered {confirmed.status_code}: {confirmed.text}")

    start = time.perf_counter()
    await asyncio.gather(*(loop(k) for k in range(clients)))
    return len(latencies), time.perf_counter() - start, sorted(latencies)


def cpu_seconds(process: PaymanagerProcess) -> float:
    times = psutil.Process(process.proc.pid).cpu_times()
    return float(times.user + times.system)


def postgres_cpu_seconds() -> float:
    """User+system CPU of every PostgreSQL process on this machine (the benchmark's database shares
    the server with whatever else runs: read it with the load average)."""
    total = 0.0
    for process in psutil.process_iter(["name"]):
        if process.info["name"] in ("postgres", "postmaster"):
            try:
                times = process.cpu_times()
            except psutil.Error:
                continue  # a backend that exited meanwhile
            total += times.user + times.system
    return total


def machine_busy_seconds() -> float:
    times = psutil.cpu_times()
    # guest time is counted in user already on Linux.
    skipped = ("idle", "iowait", "guest", "guest_nice")
    return float(sum(getattr(times, f) for f in times._fields if f not in skipped))


ROW = "   {:15s} {:5.1f}  {:9.2f}  {:8.0f}  {:6.1f}  {:6.1f} | {:8.0f}  {:6.1f}  {:6.1f}  {:9.0f}"


async def ab_round(
    s: Setup, port: int, api: PaymanagerProcess, seconds: float, rate: int
) -> tuple[float, ...]:
    """One variant's figures: load, api CPU ms per request and closed-loop req/s, p50, p99; then
    open-loop achieved req/s, p50, p99 and settled intents/s."""
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}", timeout=30, limits=httpx.Limits(max_connections=200)
    ) as http:
        client = SignedClient(http, s.shop.id, s.shop_secret)
        load = os.getloadavg()[0]
        cpu = cpu_seconds(api)
        answered, elapsed, latencies = await closed_loop(s, client, 10, seconds)
        cpu_ms = (cpu_seconds(api) - cpu) * 1000 / answered
        await drain(s.payments.pool, await count_intents(s), settled, timeout_s=120)
        _, achieved, p50, p99, done, _ = await one_rate(s, client, rate, seconds, settle=True, port=port)
    p99_closed = latencies[int(len(latencies) * 0.99) - 1] * 1000
    closed = (answered / elapsed, statistics.median(latencies) * 1000, p99_closed)
    return (load, cpu_ms, *closed, achieved, p50, p99, done)


def start_api(url: str, pythonpath: str | None) -> tuple[int, PaymanagerProcess]:
    port = free_port()
    env = paymanager_env(url, WORKER_ROLES="api", PORT=str(port), HOST="127.0.0.1", LOG_LEVEL="warning",
                         DB_POOL_MIN_SIZE="20", DB_POOL_MAX_SIZE="20")  # fmt: skip
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    return port, PaymanagerProcess(env)


async def ab_test(s: Setup, url: str, ref: str, rounds: int, seconds: float, rate: int) -> None:
    with tempfile.TemporaryDirectory(prefix="pm-bench-ab-") as tmp:
        apis = {f"A {ref}": start_api(url, export_tree(ref, Path(tmp))), "B this tree": start_api(url, None)}
        procs = workers(url, 2)
        figures: dict[str, list[tuple[float, ...]]] = {name: [] for name in apis}
        try:
            for port, process in apis.values():
                await wait_http(port, process)
            print(f"5. A/B of the api, api + 2 outbox-worker, {rounds} rounds of {seconds:.0f} s per figure:")
            print("   variant          load  api CPU ms/req  closed: req/s  p50 ms  p99 ms |"
                  f" open at {rate} req/s: achieved  p50 ms  p99 ms  settled/s")  # fmt: skip
            for r in range(rounds):
                for name in list(apis) if r % 2 == 0 else list(reversed(apis)):
                    figures[name].append(await ab_round(s, *apis[name], seconds, rate))
                    print(ROW.format(name, *figures[name][-1]))
        finally:
            stop([p for _, p in apis.values()] + procs)
    medians = {
        name: [statistics.median(col) for col in zip(*rows, strict=True)] for name, rows in figures.items()
    }
    print("   medians:")
    for name, m in medians.items():
        print(ROW.format(name, *m))
    a, b = medians.values()
    print(f"   B / A: api CPU per request {b[1] / a[1]:.2f}x, closed req/s {b[2] / a[2]:.2f}x, "
          f"closed p50 {b[3] / a[3]:.2f}x, open p50 {b[6] / a[6]:.2f}x, "
          f"open p99 {b[7] / a[7]:.2f}x")  # fmt: skip


SATURATION_P99_MS = 25.0


def rates_from(start: int, top: int) -> list[int]:
    """Rising rates, a quarter apart, rounded to 50 requests/s."""
    rates, rate = [], float(start)
    while rate <= top:
        rates.append(int(round(rate / 50) * 50))
        rate *= 1.25
    return rates


async def saturation(s: Setup, url: str, start: int, top: int, seconds: float) -> None:
    """6. The highest open-loop rate whose p99 stays under SATURATION_P99_MS, with 1 and then 2 api
    processes beside 2 outbox-workers; signatures carry nonces and the per-service rate limit is on
    (set above the top rate, so it is checked on every request but refuses none)."""
    async with s.payments.pool.acquire() as conn:
        await set_rate_limit(conn, s.shop.id, REQUESTS_PER_SEC_MAX)
    pairs = [(str(payer), str(payee)) for payer, payee in s.pairs]
    found: dict[int, int] = {}
    for n_api in (1, 2):
        apis = [start_api(url, None) for _ in range(n_api)]
        procs = workers(url, 2)
        best = 0
        try:
            for port, process in apis:
                await wait_http(port, process)
            print(f"6. saturation, {n_api} api process(es) + 2 outbox-worker, {seconds:.0f} s per rate"
                  f" (p99 < {SATURATION_P99_MS:.0f} ms, no failed request):")  # fmt: skip
            print("   target req/s  achieved req/s  p50 ms  p99 ms  failed  load")
            for rate in rates_from(start, top):
                r = await intents_open_loop([port for port, _ in apis], s.shop.id, s.shop_secret, pairs,
                                            rate, seconds)  # fmt: skip
                print(f"   {rate:13d}  {r.achieved:14.0f}  {r.p50_ms:6.1f}  {r.p99_ms:6.1f}  {r.errors:6d}"
                      f"  {os.getloadavg()[0]:4.1f}")  # fmt: skip
                if r.p99_ms >= SATURATION_P99_MS or r.errors or r.achieved < 0.95 * rate:
                    break
                best = rate
        finally:
            stop([process for _, process in apis] + procs)
        found[n_api] = best
        print(f"   saturation point with {n_api} api process(es): {best} req/s")
    if found[1]:
        print(f"   2 api processes / 1: {found[2] / found[1]:.2f}x")


async def count_intents(s: Setup) -> int:
    """p2p intents that are confirmed or settled: what the workers have to reach before the next figure."""
    return int(
        await s.payments.pool.fetchval(
            "SELECT count(*) FROM intent"
            " WHERE channel = 'internal-p2p' AND status IN ('confirmed', 'settled')"
        )
    )


async def phases_1_to_4(
    s: Setup, url: str, n: int, rates: list[int], seconds_per_rate: float, *, settle_only: bool = False
) -> None:
    async def noop(ctx: JobContext) -> None:
        async with ctx.transaction():
            pass

    baseline = await in_process(
        s, n, noop, [NewJob(SETTLE_KIND, {"n": i}, queue=OUTBOX_QUEUE) for i in range(n)]
    )
    await backlog(s, n)
    settled_rate = await in_process(s, n, settle_handler(s.payments, batch_max=BATCH), None)
    print(f"1. engine baseline, 1 in-process worker, no-op fenced jobs:  {baseline:8.0f} jobs/s")
    print(
        f"2. settlement,      1 in-process worker, intent.settle:      {settled_rate:8.0f} intents/s"
        f"  ({settled_rate / baseline:.2f} x baseline)"
    )
    await backlog(s, n)
    before = await settled(s.payments.pool)
    procs = workers(url, 2)
    try:
        # Timed from the first settlement, so process start-up and the reconciler are left out.
        await drain(s.payments.pool, before + 1, settled)
        first = await settled(s.payments.pool)
        cpu = (sum(cpu_seconds(p) for p in procs), postgres_cpu_seconds(), machine_busy_seconds())
        seconds = await drain(s.payments.pool, before + n, settled)
        workers_cores = (sum(cpu_seconds(p) for p in procs) - cpu[0]) / seconds
        postgres_cores = (postgres_cpu_seconds() - cpu[1]) / seconds
        machine_cores = (machine_busy_seconds() - cpu[2]) / seconds
    finally:
        stop(procs)
    rate = (before + n - first) / seconds
    print(
        f"3. settlement, 2 outbox-worker processes, backlog of {n}:    {rate:8.0f} intents/s"
        f"  ({rate / baseline:.2f} x baseline)"
    )
    print(
        f"   CPU while draining: outbox-workers {workers_cores:.2f} cores, PostgreSQL {postgres_cores:.2f}"
        f" cores, whole machine {machine_cores:.2f} busy of {psutil.cpu_count()};"
        f" load {os.getloadavg()[0]:.1f}"
    )
    if settle_only:
        return
    for n_workers, title in ((2, "api + 2 outbox-worker processes"), (0, "api alone, nothing settles")):
        print(f"4. end to end ({title}), p2p create + confirm:")
        print("   target req/s  achieved req/s  p50 ms  p99 ms  settled intents/s  failed intents")
        for rate, achieved, p50, p99, done, failed in await end_to_end(
            s, url, rates, seconds_per_rate, n_workers
        ):
            shown = f"{done:17.0f}" if n_workers else f"{'-':>17}"
            print(f"   {rate:13d}  {achieved:14.0f}  {p50:6.1f}  {p99:6.1f}  {shown}  {failed:14d}")


async def compare_backends(count: int, rounds: int, tb_address: str) -> None:
    """Phase 2 (one in-process worker draining confirmed intents with the real `intent.settle`
    handler) on the PostgreSQL ledger and on TigerBeetle, in the same run, rounds alternating."""
    urls = {"postgres": await make_database(), "tigerbeetle": await make_database()}
    try:
        setups = {
            "postgres": await setup(urls["postgres"]),
            "tigerbeetle": await setup(
                urls["tigerbeetle"], ledger_backend="tigerbeetle", tb_address=tb_address
            ),
        }
        figures: dict[str, list[float]] = {name: [] for name in setups}
        for round_ in range(rounds):
            order = list(setups) if round_ % 2 == 0 else list(reversed(setups))
            for name in order:
                s = setups[name]
                await backlog(s, count)
                figures[name].append(
                    await in_process(s, count, settle_handler(s.payments, batch_max=BATCH), None)
                )
        for s in setups.values():
            await s.components.close()
            await s.payments.pool.close()
    finally:
        for url in urls.values():
            await drop_database(url)
    print(f"settlement, 1 in-process worker, {count} confirmed intents per round, median of {rounds} rounds:")
    for name, values in figures.items():
        print(
            f"  {name:<12} {statistics.median(values):8.0f} intents/s"
            f"  ({min(values):.0f} .. {max(values):.0f})"
        )
    ratio = statistics.median(figures["tigerbeetle"]) / statistics.median(figures["postgres"])
    print(f"  tigerbeetle / postgres: {ratio:.2f}x (goal >= 1x)")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=5_000, help="Jobs / intents per drain phase.")
    parser.add_argument("--rates", default="100,200,300,400", help="Request rates of the end-to-end phase.")
    parser.add_argument("--seconds", type=float, default=5.0, help="Seconds per rate.")
    parser.add_argument("--ab", metavar="REF", help="Also compare the api of git ref REF with this tree's.")
    parser.add_argument("--ab-rounds", type=int, default=4, help="Rounds of the A/B, each variant once.")
    parser.add_argument("--ab-rate", type=int, default=300, help="Open-loop request rate of the A/B.")
    parser.add_argument("--only-ab", action="store_true", help="Run the A/B alone (needs --ab).")
    parser.add_argument(
        "--saturation",
        metavar="START:STOP",
        help="Also find the saturation point with 1 and 2 api processes, rates from START to STOP.",
    )
    parser.add_argument("--only-saturation", action="store_true", help="Run phase 6 alone.")
    parser.add_argument("--loadgen", choices=("raw", "httpx"), default="raw",
                        help="Open-loop load generator: bench/http_load.py or httpx.")  # fmt: skip
    parser.add_argument(
        "--settle-only",
        action="store_true",
        help="Run phases 1-3 alone (the engine baseline and settlement).",
    )
    parser.add_argument(
        "--backend", choices=("postgres", "tigerbeetle"), default="postgres",
        help="tigerbeetle: settlement (phase 2) on TigerBeetle beside the PostgreSQL ledger, alone",
    )  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3, help="Rounds of --backend tigerbeetle.")
    args = parser.parse_args()
    if args.backend == "tigerbeetle":
        from bench.ledger import with_tigerbeetle

        await with_tigerbeetle(lambda address: compare_backends(args.count, args.rounds, address))
        return
    global LOADGEN
    LOADGEN = args.loadgen
    if args.only_ab and not args.ab:
        parser.error("--only-ab needs --ab REF")
    if args.only_saturation and not args.saturation:
        parser.error("--only-saturation needs --saturation START:STOP")
    print(f"load average at start: {os.getloadavg()[0]:.1f} (2 cores, shared)")
    url = await make_database()
    try:
        s = await setup(url)
        if args.saturation:
            first, last = (int(x) for x in args.saturation.split(":"))
        if args.only_saturation:
            await saturation(s, url, first, last, args.seconds)
        elif not args.only_ab:
            rates = [int(r) for r in args.rates.split(",")]
            await phases_1_to_4(s, url, args.count, rates, args.seconds, settle_only=args.settle_only)
        if args.saturation and not args.only_saturation:
            await saturation(s, url, first, last, args.seconds)
        if args.ab:
            await ab_test(s, url, args.ab, args.ab_rounds, args.seconds, args.ab_rate)
        await s.payments.pool.close()
        print(f"load average at end: {os.getloadavg()[0]:.1f}")
    finally:
        await drop_database(url)


if __name__ == "__main__":
    asyncio.run(main())
