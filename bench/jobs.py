"""Job engine benchmark: paymanager's engine against PGQueuer, in ONE run on the same PostgreSQL.

    .venv/bin/python bench/jobs.py [--jobs 100000] [--retention-jobs 100000] [--retention-rounds 5]
                                   [--skip-retention] [--only proc1,proc2,latency] [--loop uvloop|asyncio]
                                   [--beside-limited] [--pgq-batch sweep|N] [--pgq-sweep 100,250,500,1000]
                                   [--ours-concurrency sweep|N] [--ours-sweep 200,400,800,1600]
                                   [--floor-burn-us U]
                                   (--only takes: bulk, proc1, proc2, single, latency, floor)

PGQueuer runs at its best batch size on this machine: with `--pgq-batch sweep` (the default) each
size of `--pgq-sweep` processes the N jobs with one worker process first, the fastest is printed and
used for every figure; `--pgq-batch N` fixes it. paymanager runs at its best per-process concurrency
the same way: `--ours-concurrency sweep` (the default) tries each of `--ours-sweep` (a claim takes
concurrency / pipeline jobs within claim_batch_max, `claim_size()`, so the concurrency sets the
claim's size as PGQueuer's batch size sets its fetch), `--ours-concurrency N` fixes it (200 is the
setting of the sittings before 2026-12-06 21:35).

Figures (each printed with PGQueuer's figure from the same run and the ratio):
- processing N pre-queued no-op jobs with 1 and 2 worker processes (leases, heartbeats, fencing on,
  logged tables on both sides);
- bulk enqueue of N jobs; single enqueues, each in its own transaction;
- enqueue-to-start latency of 200 jobs enqueued 20 ms apart into idle workers (p50, p99);
- peak RSS of a worker process;
- size of the jobs table after a long run with retention on (printed per round: it must plateau).

With `--beside-limited`, every round measures paymanager's processing twice: alone, and with its worker
processes also serving a rate-limited queue (100 jobs per second) and a globally limited one (5
running at once over both processes), each busy throughout the run, the figure counting the plain
queue alone; printed as the ratio beside / alone per round: what the limits cost a queue without them.
A side job sleeps 5 ms (BENCH_SIDE_JOB_MS sets another duration: a partner's call takes longer).

The `floor` figure drains the same N jobs with a bare loop of the worker's own claim-and-complete
statement (`job_claim_batch`: the worker's batch, pipeline and generic plans, in one process on the
same loop) with no engine around it, and prints one worker process's throughput as a ratio to it,
per round: what the engine's own Python costs over the statements it sends. `--floor-burn-us U`
makes the bare loop burn U us of CPU per claimed job before its next claim (on the loop, as a
handler's Python would): the burn at which the floor meets the engine is the engine's own Python per
job, in the units that decide throughput.

Worker processes and the latency producer of both engines run on uvloop (`--loop`), as both
engines' command-line runners do where it is installed (`paymanager run`, `pgq run`).

Each engine gets its own fresh database on the server (TEST_DATABASE_URL or 127.0.0.1:5432),
dropped at the end. Worker processes are this script run with `worker ...` arguments; they connect,
say `ready`, wait for `go` on stdin, and print one JSON line of results.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from paymanager.db import migrations
from paymanager.db.pool import create_pool
from paymanager.jobs import (
    JobContext,
    NewJob,
    Registry,
    Retention,
    Worker,
    WorkerOptions,
    enqueue,
    enqueue_many,
)
from paymanager.jobs.maintenance import Maintenance
from paymanager.jobs.options import MaintenanceOptions

T = TypeVar("T")
SERVER = os.environ.get("TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
QUEUE = "bench"
# Worker processes inherit these through the environment (the A/B knobs of a tuning session).
# The per-process concurrency: chosen by the sweep (bench), else 200, which with the pipeline of 2
# claims makes claims of up to 100 jobs.
CONCURRENCY = int(os.environ.get("BENCH_CONCURRENCY", "200"))
PIPELINE = int(os.environ.get("BENCH_PIPELINE", "2"))
NOTIFY_COMPLETED = os.environ.get("BENCH_NOTIFY_COMPLETED", "1") == "1"
# BENCH_QUICK_CLAIM=0: every claim waits for its WAL flush (WorkerOptions.quick_claim_commit off).
QUICK_CLAIM = os.environ.get("BENCH_QUICK_CLAIM", "1") == "1"
# BENCH_DELETE_COMPLETED=1: completed jobs are deleted as they complete (WorkerOptions.delete_completed),
# as PGQueuer does; off (as the engine's default), they stay for retention to prune.
DELETE_COMPLETED = os.environ.get("BENCH_DELETE_COMPLETED", "0") == "1"
# The event loop of worker processes and of the latency producer (set by --loop).
LOOP = os.environ.get("BENCH_LOOP", "uvloop")
FIGURES = ("bulk", "proc1", "proc2", "single", "latency", "floor")
# --beside-limited: the limited queues beside the plain one, and the jobs that keep them busy.
RATED, RATED_PER_S, RATED_JOBS = "bench.rated", 100, 2_000
CAPPED, CAPPED_RUNNING, CAPPED_JOBS = "bench.capped", 5, 20_000
# A side queue without limits, held to about as many side jobs by its per-process concurrency
# (bench/beside_toggle.py --only plain: what side jobs cost the plain queue with no limit involved).
SIDE_PLAIN, SIDE_PLAIN_RUNNING, SIDE_PLAIN_JOBS = "bench.side", 2, 40_000
# PGQueuer's batch_size: chosen by the sweep (bench) and passed to worker processes by environment.
PGQ_BATCH = int(os.environ.get("BENCH_PGQ_BATCH", "100"))
# --floor-burn-us: CPU the bare claim loop burns per claimed job (worker processes read it here).
FLOOR_BURN_US = float(os.environ.get("BENCH_FLOOR_BURN_US", "0"))
LATENCY_JOBS = 200
LATENCY_GAP_S = 0.020
SINGLE_ENQUEUES = 2_000
DRAIN_POLL_S = 0.005
# Both drain checks read one index entry (ours: the partial indexes; PGQueuer's table shrinks).
OURS_BUSY = (
    "SELECT EXISTS (SELECT 1 FROM job WHERE state = 'available')"
    " OR EXISTS (SELECT 1 FROM job WHERE state = 'running')"
)
PGQ_BUSY = "SELECT EXISTS (SELECT 1 FROM pgqueuer)"
# The plain queue alone, when limited queues run beside it.
OURS_PLAIN_BUSY = (
    f"SELECT EXISTS (SELECT 1 FROM job WHERE state = 'available' AND queue = '{QUEUE}')"
    f" OR EXISTS (SELECT 1 FROM job WHERE state = 'running' AND queue = '{QUEUE}')"
)


def beside_limited() -> bool:
    return os.environ.get("BENCH_BESIDE_LIMITED", "0") == "1"


def side_job_s() -> float:
    """How long a side job takes (BENCH_SIDE_JOB_MS, read when asked: bench/jobs_ab.py sets it per
    tree). 5 ms is the stress case, the capped queue able to start a thousand jobs a second; a
    partner's API answers in tens to hundreds of milliseconds."""
    return float(os.environ.get("BENCH_SIDE_JOB_MS", "5")) / 1000


def run_on_loop(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` on the event loop the benchmark was asked for (the same for both engines)."""
    if os.environ.get("BENCH_LOOP", LOOP) == "uvloop":
        import uvloop

        return uvloop.run(coro)
    return asyncio.run(coro)


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


async def create_database(engine: str, *, install: bool = True) -> str:
    """A new database for `engine`, with its schema unless `install` is false."""
    name = f"pmbench_{engine}_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(SERVER)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    dsn = with_database(SERVER, name)
    if not install:
        return dsn
    conn = await asyncpg.connect(dsn)
    try:
        if engine == "ours":
            await migrations.migrate(conn)
        else:
            from pgqueuer.queries import Queries

            await Queries.from_asyncpg_connection(conn).install()
    finally:
        await conn.close()
    return dsn


async def drop_database(dsn: str) -> None:
    admin = await asyncpg.connect(SERVER)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{urlsplit(dsn).path.lstrip("/")}" WITH (FORCE)')
    finally:
        await admin.close()


# --- enqueueing (in this process) ------------------------------------------------------------------


async def ours_bulk(dsn: str, n: int) -> float:
    pool = await create_pool(dsn, min_size=1, max_size=2)
    try:
        jobs = [NewJob("noop", {"i": i}, queue=QUEUE) for i in range(n)]
        started = time.perf_counter()
        async with pool.acquire() as conn, conn.transaction():
            await enqueue_many(conn, jobs)
        return time.perf_counter() - started
    finally:
        await pool.close()


async def pgq_bulk(dsn: str, n: int) -> float:
    from pgqueuer.queries import Queries

    conn = await asyncpg.connect(dsn)
    try:
        queries = Queries.from_asyncpg_connection(conn)
        payloads: list[bytes | None] = [json.dumps({"i": i}).encode() for i in range(n)]
        started = time.perf_counter()
        await queries.enqueue(["noop"] * n, payloads, [0] * n)
        return time.perf_counter() - started
    finally:
        await conn.close()


async def ours_singles(dsn: str, n: int) -> float:
    pool = await create_pool(dsn, min_size=1, max_size=2)
    try:
        async with pool.acquire() as conn:
            started = time.perf_counter()
            for i in range(n):
                await enqueue(conn, "noop", {"i": i}, queue="singles")
            return time.perf_counter() - started
    finally:
        await pool.close()


async def pgq_singles(dsn: str, n: int) -> float:
    from pgqueuer.queries import Queries

    conn = await asyncpg.connect(dsn)
    try:
        queries = Queries.from_asyncpg_connection(conn)
        started = time.perf_counter()
        for i in range(n):
            await queries.enqueue("single", json.dumps({"i": i}).encode(), 0)
        return time.perf_counter() - started
    finally:
        await conn.close()


# --- worker processes ------------------------------------------------------------------------------


def spawn(engine: str, dsn: str, mode: str, beside: bool = False) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, __file__, "worker", engine, dsn, mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "BENCH_BESIDE_LIMITED": "1" if beside else "0"},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if line != "ready":
        raise RuntimeError(f"worker did not start: {line!r}")
    return proc


def go(procs: Sequence[subprocess.Popen[str]]) -> None:
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()


def results(procs: Sequence[subprocess.Popen[str]]) -> list[dict[str, Any]]:
    out = []
    for proc in procs:
        assert proc.stdout is not None
        out.append(json.loads(proc.stdout.readline()))
        proc.wait(timeout=60)
    return out


def process_run(engine: str, dsn: str, workers: int, beside: bool = False) -> tuple[float, int]:
    """Seconds from `go` until the queue is empty, and the largest worker RSS (KiB).

    This process watches for the empty queue on its own connection (every 5 ms, one index probe),
    so the workers' loops carry nothing but the engine; then it tells them to stop. `beside`: the
    limited queues are filled and served too (paymanager only), and the plain queue alone is watched.
    `engine` "floor" is the bare claim loop on paymanager's database.
    """
    if beside:
        asyncio.run(fill_limited_queues(dsn))
    procs = [spawn(engine, dsn, "drain", beside) for _ in range(workers)]
    busy = PGQ_BUSY if engine == "pgq" else OURS_PLAIN_BUSY if beside else OURS_BUSY

    async def watch() -> float:
        conn = await asyncpg.connect(dsn)
        try:
            go(procs)
            started = time.perf_counter()
            while await conn.fetchval(busy):  # noqa: ASYNC110 - polls the database; no event exists
                await asyncio.sleep(DRAIN_POLL_S)
            return time.perf_counter() - started
        finally:
            await conn.close()

    seconds = asyncio.run(watch())
    go(procs)  # the second line says stop
    done = results(procs)
    if beside:
        asyncio.run(report_limited_queues(dsn, workers, seconds))
    return seconds, max(r["rss_kib"] for r in done)


async def fill_limited_queues(dsn: str) -> None:
    """Limit the side queues and fill them with enough jobs to stay busy for the whole run."""
    from paymanager.jobs import set_global_concurrency, set_rate_limit

    pool = await create_pool(dsn, min_size=1, max_size=1)
    try:
        async with pool.acquire() as conn:
            await set_rate_limit(conn, RATED, max_jobs=RATED_PER_S, window_ms=1_000)
            await set_global_concurrency(conn, CAPPED, CAPPED_RUNNING)
            await enqueue_many(conn, [NewJob("side", {"i": i}, queue=RATED) for i in range(RATED_JOBS)])
            await enqueue_many(conn, [NewJob("side", {"i": i}, queue=CAPPED) for i in range(CAPPED_JOBS)])
    finally:
        await pool.close()


async def side_jobs_completed(conn: asyncpg.Connection) -> dict[str, int]:
    """The jobs completed per queue other than the plain one."""
    rows = await conn.fetch(
        "SELECT queue, count(*) AS n FROM job WHERE queue <> $1 AND state = 'completed'"
        " GROUP BY queue ORDER BY queue",
        QUEUE,
    )
    return {row["queue"]: int(row["n"]) for row in rows}


async def report_limited_queues(dsn: str, workers: int, seconds: float) -> None:
    """How much the limited queues did while the plain queue drained (they must have been busy)."""
    conn = await asyncpg.connect(dsn)
    try:
        done = await side_jobs_completed(conn)
        await conn.execute("DELETE FROM job WHERE queue <> $1", QUEUE)
    finally:
        await conn.close()
    print(
        f"  beside, {workers} process(es), {seconds:.2f} s: {done.get(RATED, 0)} jobs of {RATED} "
        f"({RATED_PER_S}/1s), {done.get(CAPPED, 0)} of {CAPPED} ({CAPPED_RUNNING} at once) completed, "
        f"side jobs of {side_job_s() * 1000:g} ms",
        flush=True,
    )


def latency_run(engine: str, dsn: str) -> tuple[list[float], list[float]]:
    """Enqueue-to-start latencies, and how long each of the producer's enqueue calls took (the
    part of the latency that is the producer's own INSERT and durable commit)."""
    proc = spawn(engine, dsn, "latency")
    go([proc])
    time.sleep(0.5)  # let the worker go idle: the first jobs must not find it polling
    calls: list[float] = []

    async def produce() -> None:
        if engine == "ours":
            # One connection held throughout, as PGQueuer's producer below: no pool reset between
            # the enqueues.
            pool = await create_pool(dsn, min_size=1, max_size=1)
            async with pool.acquire() as conn:
                for i in range(LATENCY_JOBS):
                    t = time.time()
                    await enqueue(conn, "latency", {"t": t, "i": i}, queue=QUEUE)
                    calls.append((time.time() - t) * 1000)
                    await asyncio.sleep(LATENCY_GAP_S)
            await pool.close()
        else:
            from pgqueuer.queries import Queries

            conn = await asyncpg.connect(dsn)
            queries = Queries.from_asyncpg_connection(conn)
            for i in range(LATENCY_JOBS):
                t = time.time()
                await queries.enqueue("latency", json.dumps({"t": t, "i": i}).encode(), 0)
                calls.append((time.time() - t) * 1000)
                await asyncio.sleep(LATENCY_GAP_S)
            await conn.close()

    run_on_loop(produce())
    (result,) = results([proc])
    return [float(x) for x in result["latencies_ms"]], calls


async def ours_worker(
    dsn: str,
    mode: str,
    on_noop: Callable[[], None] | None = None,
    limited: bool | None = None,
    side_plain: bool = False,
) -> dict[str, Any]:
    """paymanager's worker for one drain (or one latency run): `on_noop` is called for each noop
    job (bench/beside_toggle.py counts them), `limited` overrides BENCH_BESIDE_LIMITED, `side_plain`
    serves SIDE_PLAIN too."""
    latencies: list[float] = []
    expected = LATENCY_JOBS if mode == "latency" else None
    finished = asyncio.Event()
    registry = Registry()

    async def noop(ctx: JobContext) -> None:
        return None

    async def counted(ctx: JobContext) -> None:
        assert on_noop is not None
        on_noop()

    async def latency(ctx: JobContext) -> None:
        latencies.append((time.time() - ctx.payload["t"]) * 1000)
        if expected is not None and len(latencies) >= expected:
            finished.set()

    side_s = side_job_s()

    async def side(ctx: JobContext) -> None:
        await asyncio.sleep(side_s)

    registry.register("noop", noop if on_noop is None else counted, queue=QUEUE)
    registry.register("latency", latency, queue=QUEUE)
    registry.register("side", side, queue=RATED)
    with_limited = beside_limited() if limited is None else limited
    queues = {QUEUE: CONCURRENCY, RATED: 10, CAPPED: 10} if with_limited else {QUEUE: CONCURRENCY}
    if side_plain:
        queues[SIDE_PLAIN] = SIDE_PLAIN_RUNNING
    pool = await create_pool(dsn, min_size=2, max_size=PIPELINE + 3)
    options = WorkerOptions(
        owner=f"bench-{os.getpid()}",
        lease_ms=30_000,
        heartbeat_interval_ms=10_000,
        claim_pipeline=PIPELINE,
        notify_completed_events=NOTIFY_COMPLETED,
        quick_claim_commit=QUICK_CLAIM,
        delete_completed=DELETE_COMPLETED,
    )
    worker = Worker(pool, dsn, registry, queues, options)
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    await worker.start()
    if mode == "latency":
        await finished.wait()
    else:
        await asyncio.to_thread(sys.stdin.readline)
    await worker.stop(timeout_s=5)
    await pool.close()
    return {"latencies_ms": latencies}


async def floor_worker(dsn: str, mode: str) -> dict[str, Any]:
    """The floor: PIPELINE connections, each a bare loop of job_claim_batch claiming up to
    claim_size() jobs and completing its previous batch in the same statement, as a worker process's
    claims do (the same options, generic plans), with nothing else around them."""
    from paymanager.db.pool import init_connection
    from paymanager.jobs._queries import Q

    batch = claim_size()
    conns = [await asyncpg.connect(dsn) for _ in range(PIPELINE)]
    for conn in conns:
        await init_connection(conn)
        await conn.fetch(Q["job_session_generic_plans"])
    claim = Q["job_claim_batch_deleting" if DELETE_COMPLETED else "job_claim_batch"]

    async def loop(conn: asyncpg.Connection) -> None:
        ids: list[int] = []
        tokens: list[uuid.UUID] = []
        while True:
            rows = await conn.fetch(
                claim, [QUEUE], [batch], "floor", 30_000, ids, tokens, [None] * len(ids),
                NOTIFY_COMPLETED, QUICK_CLAIM and not ids,
            )  # fmt: skip
            claimed = [r for r in rows if r["claimed"]]
            if not claimed and not ids:
                return
            ids = [r["id"] for r in claimed]
            tokens = [r["lease_token"] for r in claimed]
            if FLOOR_BURN_US:
                burn_until = time.perf_counter() + FLOOR_BURN_US * len(claimed) / 1e6
                while time.perf_counter() < burn_until:
                    pass

    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    await asyncio.gather(*(loop(c) for c in conns))
    await asyncio.to_thread(sys.stdin.readline)
    for conn in conns:
        await conn.close()
    return {}


async def wait_empty(pool: Any, query: str) -> float:
    while await pool.fetchval(query):  # noqa: ASYNC110 - polls the database; no event exists
        await asyncio.sleep(DRAIN_POLL_S)
    return time.time()


async def pgq_worker(dsn: str, mode: str) -> dict[str, Any]:
    from pgqueuer.models import Job
    from pgqueuer.qm import QueueManager
    from pgqueuer.queries import Queries

    latencies: list[float] = []
    pool = await asyncpg.create_pool(dsn, min_size=4, max_size=4)
    manager = QueueManager(Queries.from_asyncpg_pool(pool))

    @manager.entrypoint("noop")
    async def noop(job: Job) -> None:
        return None

    @manager.entrypoint("latency")
    async def latency(job: Job) -> None:
        assert job.payload is not None
        latencies.append((time.time() - json.loads(job.payload)["t"]) * 1000)
        if len(latencies) >= LATENCY_JOBS:
            manager.shutdown.set()

    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    if mode == "latency":
        await manager.run(batch_size=PGQ_BATCH)
    else:
        runner = asyncio.create_task(manager.run(batch_size=PGQ_BATCH))
        await asyncio.to_thread(sys.stdin.readline)
        manager.shutdown.set()
        await runner
    await pool.close()
    return {"latencies_ms": latencies}


def peak_rss_kib() -> int:
    """VmHWM of this process. (getrusage's ru_maxrss survives exec on Linux, so a worker started by
    a big parent would report the parent's peak.)"""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def worker_main(engine: str, dsn: str, mode: str) -> None:
    from paymanager.logging import configure_logging

    # stdout carries the protocol with the parent; logs go to stderr.
    configure_logging("warning", "json")
    runner = {"ours": ours_worker, "pgq": pgq_worker, "floor": floor_worker}[engine]
    result = run_on_loop(runner(dsn, mode))
    result["rss_kib"] = peak_rss_kib()
    print(json.dumps(result), flush=True)


# --- retention run -----------------------------------------------------------------------------------


async def retention_run(dsn: str, total: int, rounds: int) -> list[tuple[int, int, int]]:
    """Push `total` jobs through one worker with the pruner on; (jobs done, table bytes, rows) per round."""
    pool = await create_pool(dsn, min_size=2, max_size=6)
    registry = Registry()
    registry.register("noop", lambda ctx: None, queue=QUEUE)

    async def noop(ctx: JobContext) -> None:
        return None

    registry = Registry()
    registry.register("noop", noop, queue=QUEUE)
    worker = Worker(pool, dsn, registry, {QUEUE: CONCURRENCY}, WorkerOptions(owner="retention"))
    retention = Retention(completed_age_ms=60_000, completed_count=1_000)
    maintenance = Maintenance(
        pool,
        dsn,
        MaintenanceOptions(
            prune_interval_ms=500, retention=retention, prune_batch_max=5_000, vacuum_interval_ms=2_000
        ),
    )
    await worker.start()
    await maintenance.start()
    sizes: list[tuple[int, int, int]] = []
    per_round = total // rounds
    for r in range(rounds):
        async with pool.acquire() as conn:
            await enqueue_many(conn, [NewJob("noop", {"i": i}, queue=QUEUE) for i in range(per_round)])
        await wait_empty(pool, OURS_BUSY)
        await maintenance.prune()
        size = await pool.fetchval("SELECT pg_total_relation_size('job')")
        rows = await pool.fetchval("SELECT count(*) FROM job")
        sizes.append(((r + 1) * per_round, int(size), int(rows)))
    await maintenance.stop(5)
    await worker.stop(5)
    await pool.close()
    return sizes


# --- report ---------------------------------------------------------------------------------------------


def ratio_line(label: str, ours: float, theirs: float, unit: str, higher_is_better: bool = True) -> str:
    ratio = (ours / theirs if higher_is_better else theirs / ours) if ours and theirs else float("nan")
    figures = f"paymanager {ours:>10.1f} {unit:<7} PGQueuer {theirs:>10.1f} {unit:<7}"
    return f"{label:<44} {figures} ratio {ratio:.2f}x"


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


async def reset(engine: str, dsn: str) -> None:
    """Empty the engine's tables between runs, so every run starts from the same state."""
    conn = await asyncpg.connect(dsn)
    try:
        if engine == "ours":
            await conn.execute("TRUNCATE job")
        else:
            await conn.execute("TRUNCATE pgqueuer, pgqueuer_log")
    finally:
        await conn.close()


# Each engine's bulk enqueue of the N jobs a drain processes.
BULK = {"ours": ours_bulk, "pgq": pgq_bulk}


def one_round(engine: str, dsn: str, n: int, only: set[str], beside: bool = False) -> dict[str, float]:
    """Every figure in `only` once for one engine; `beside`: paymanager's processing again with the
    limited queues served beside the plain one (`procN_beside`)."""
    bulk = BULK[engine]
    single = ours_singles if engine == "ours" else pgq_singles
    figures: dict[str, float] = {}
    for workers in (1, 2):
        if "bulk" in only or f"proc{workers}" in only:
            asyncio.run(reset(engine, dsn))
            seconds = asyncio.run(bulk(dsn, n))
            figures.setdefault("bulk", n / seconds)
        if f"proc{workers}" in only:
            seconds, peak = process_run(engine, dsn, workers)
            figures[f"proc{workers}"] = n / seconds
            figures["rss"] = max(figures.get("rss", 0.0), peak / 1024)
            if beside and engine == "ours":
                asyncio.run(reset(engine, dsn))
                asyncio.run(bulk(dsn, n))
                seconds, _ = process_run(engine, dsn, workers, beside=True)
                figures[f"proc{workers}_beside"] = n / seconds
    if "floor" in only and engine == "ours":
        asyncio.run(reset(engine, dsn))
        asyncio.run(bulk(dsn, n))
        seconds, _ = process_run("floor", dsn, 1)
        figures["floor"] = n / seconds
    if "single" in only:
        asyncio.run(reset(engine, dsn))
        figures["single"] = SINGLE_ENQUEUES / asyncio.run(single(dsn, SINGLE_ENQUEUES))
    if "latency" in only:
        asyncio.run(reset(engine, dsn))
        latencies, calls = latency_run(engine, dsn)
        figures["p50"] = percentile(latencies, 50)
        figures["p99"] = percentile(latencies, 99)
        figures["enqueue_p50"] = percentile(calls, 50)
        figures["enqueue_p99"] = percentile(calls, 99)
    return figures


def report(n: int, rounds: dict[str, list[dict[str, float]]]) -> None:
    o = {k: statistics.median(f[k] for f in rounds["ours"]) for k in rounds["ours"][0]}
    p = {k: statistics.median(f[k] for f in rounds["pgq"]) for k in rounds["pgq"][0]}
    lines = [
        ("proc1", f"processing {n} jobs, 1 worker process", "jobs/s", True),
        ("proc2", f"processing {n} jobs, 2 worker processes", "jobs/s", True),
        ("bulk", f"bulk enqueue of {n} jobs", "jobs/s", True),
        ("single", f"single enqueues ({SINGLE_ENQUEUES}, own transaction)", "jobs/s", True),
        ("p50", f"enqueue-to-start latency p50 ({LATENCY_JOBS} jobs)", "ms", False),
        ("p99", f"enqueue-to-start latency p99 ({LATENCY_JOBS} jobs)", "ms", False),
        ("enqueue_p50", "  of it, the producer's enqueue call, p50", "ms", False),
        ("enqueue_p99", "  the producer's enqueue call, p99", "ms", False),
        ("rss", "peak RSS of a worker process", "MiB", False),
    ]
    for key, label, unit, higher_is_better in lines:
        if key in o:
            print(ratio_line(label, o[key], p[key], unit, higher_is_better=higher_is_better))
    for key in ("proc1", "proc2", "p50"):
        if key in o:
            # The ratio reads as the headline's: higher is paymanager's better (a latency inverted).
            pairs = ", ".join(
                f"{a[key]:.1f}/{b[key]:.1f} ({(b[key] / a[key]) if key == 'p50' else (a[key] / b[key]):.2f}x)"
                for a, b in zip(rounds["ours"], rounds["pgq"], strict=True)
            )
            print(f"  {key} per round (paymanager/PGQueuer, ratio): {pairs}")
    ours_only(n, rounds["ours"])


def ours_only(n: int, rounds: list[dict[str, float]]) -> None:
    """paymanager's figures against its own: the floor, and the plain queue beside limited queues."""
    pairs = [
        ("floor", "proc1", f"the floor: claims of {claim_size()}, {n} jobs", "1 worker process / floor"),
        ("proc1_beside", "proc1", "1 process, limited queues beside", "beside / alone"),
        ("proc2_beside", "proc2", "2 processes, limited queues beside", "beside / alone"),
    ]
    for key, base, label, ratio_label in pairs:
        if key not in rounds[0] or base not in rounds[0]:
            continue
        ratios = [f[base] / f[key] if key == "floor" else f[key] / f[base] for f in rounds]
        per_round = ", ".join(
            f"{f[base]:.0f}/{f[key]:.0f} ({r:.2f}x)"
            if key == "floor"
            else f"{f[key]:.0f}/{f[base]:.0f} ({r:.2f}x)"
            for f, r in zip(rounds, ratios, strict=True)
        )
        median = statistics.median(f[key] for f in rounds)
        print(
            f"{label:<44} paymanager {median:>10.1f} jobs/s  {ratio_label} {statistics.median(ratios):.2f}x"
        )
        print(f"  per round ({ratio_label}): {per_round}")


# What each engine's sweep sets: the module global its worker processes read, the environment
# variable they inherit it by, and how the sweep's line names it.
SWEPT = {
    "pgq": ("PGQ_BATCH", "BENCH_PGQ_BATCH", "PGQueuer batch"),
    "ours": ("CONCURRENCY", "BENCH_CONCURRENCY", "paymanager concurrency"),
}


def claim_size() -> int:
    """The jobs one claim of the engine takes at most (worker.py's `_reserve`: a share of the
    concurrency per claim in flight, within claim_batch_max). The floor's bare loop claims as many,
    so both send the same statements: at 1,600 a share (800) is over claim_batch_max (500)."""
    return min(-(-CONCURRENCY // PIPELINE), WorkerOptions().claim_batch_max)


def set_swept(engine: str, value: int) -> None:
    """Set the engine's swept setting here and for the worker processes started from now."""
    name, env, _ = SWEPT[engine]
    globals()[name] = value
    os.environ[env] = str(value)


def sweep(engine: str, dsn: str, n: int, values: list[int]) -> int:
    """The engine's fastest setting here (PGQueuer's batch size, paymanager's per-process
    concurrency): each value processes `n` jobs with one worker process; the best is set."""
    speeds: dict[int, float] = {}
    for value in values:
        set_swept(engine, value)
        asyncio.run(reset(engine, dsn))
        asyncio.run(BULK[engine](dsn, n))
        seconds, _ = process_run(engine, dsn, 1)
        speeds[value] = n / seconds
    best = max(speeds, key=lambda value: speeds[value])
    shown = ", ".join(f"{value}: {speed:.0f} jobs/s" for value, speed in speeds.items())
    print(f"# {SWEPT[engine][2]} sweep (1 process, {n} jobs): {shown}; best {best}", flush=True)
    set_swept(engine, best)
    return best


def bench(args: argparse.Namespace) -> None:
    from paymanager.logging import configure_logging

    configure_logging("warning", "json")
    n = args.jobs
    only = set(args.only.split(","))
    if unknown := only - set(FIGURES):
        raise SystemExit(f"--only: unknown figures {sorted(unknown)}; choose from {', '.join(FIGURES)}")
    created: list[str] = []
    try:
        dsns = {engine: asyncio.run(create_database(engine)) for engine in ("ours", "pgq")}
        created.extend(dsns.values())
        for engine, setting, values in (
            ("pgq", args.pgq_batch, args.pgq_sweep),
            ("ours", args.ours_concurrency, args.ours_sweep),
        ):
            if setting == "sweep":
                sweep(engine, dsns[engine], n, [int(v) for v in values.split(",")])
            else:
                set_swept(engine, int(setting))
        print(
            f"# job engine benchmark: {n} jobs, concurrency {CONCURRENCY} per worker process "
            f"(PGQueuer batch {PGQ_BATCH}), {args.rounds} interleaved rounds, median shown; "
            f"workers on {os.environ['BENCH_LOOP']}; PostgreSQL at {urlsplit(SERVER).netloc}"
            + ("; paymanager deletes completed jobs" if DELETE_COMPLETED else "")
            + (
                "; paymanager's processing also with a rate-limited and a globally limited queue beside"
                if args.beside_limited
                else ""
            )
        )
        rounds: dict[str, list[dict[str, float]]] = {"ours": [], "pgq": []}
        for r in range(args.rounds):
            # Alternate which engine goes first: the machine's load drifts during a run.
            for engine in ("ours", "pgq") if r % 2 == 0 else ("pgq", "ours"):
                rounds[engine].append(one_round(engine, dsns[engine], n, only, args.beside_limited))
        report(n, rounds)
        if not args.skip_retention:
            dsn = asyncio.run(create_database("ours"))
            created.append(dsn)
            for done, size, rows in asyncio.run(
                retention_run(dsn, args.retention_jobs, args.retention_rounds)
            ):
                print(
                    f"jobs table after {done:>7} jobs (keep 1000 completed): "
                    f"{size / 1024:>8.0f} KiB, {rows} rows"
                )
    finally:
        for dsn in created:
            with contextlib.suppress(Exception):
                asyncio.run(drop_database(dsn))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker_main(sys.argv[2], sys.argv[3], sys.argv[4])
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--retention-jobs", type=int, default=100_000)
    parser.add_argument("--retention-rounds", type=int, default=5, help="rounds of the retention run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-retention", action="store_true")
    parser.add_argument(
        "--only", default=",".join(FIGURES), help=f"figures to measure, comma-separated: {', '.join(FIGURES)}"
    )
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default=LOOP, help="worker processes' loop")
    parser.add_argument(
        "--beside-limited", action="store_true", help="a rate-limited and a globally limited queue run beside"
    )
    parser.add_argument("--pgq-batch", default="sweep", help="PGQueuer's batch size, or `sweep`")
    parser.add_argument("--pgq-sweep", default="100,250,500,1000", help="the sizes the sweep tries")
    parser.add_argument(
        "--ours-concurrency", default="sweep", help="paymanager's per-process concurrency, or `sweep`"
    )
    parser.add_argument("--ours-sweep", default="200,400,800,1600", help="the concurrencies the sweep tries")
    parser.add_argument(
        "--floor-burn-us", type=float, default=0, help="CPU the floor's loop burns per job (us)"
    )
    args = parser.parse_args()
    # Worker processes read them from the environment they inherit.
    os.environ["BENCH_LOOP"] = args.loop
    os.environ["BENCH_FLOOR_BURN_US"] = str(args.floor_burn_us)
    bench(args)


if __name__ == "__main__":
    main()
