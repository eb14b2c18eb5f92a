"""The CPU budget of one signed create+confirm request, over every process that works for it.

Run: `.venv/bin/python bench/request_budget.py [--rate 150 --seconds 10 --rounds 2 --apis 2]`
(PostgreSQL at BENCH_DATABASE_URL, default localhost:5432; a fresh database, dropped at the end).

`--apis` api processes and 2 `outbox-worker` processes serve p2p create + confirm, sent open-loop at
`--rate` requests/s by bench/http_load.py (its own process; rate limits and nonces on, as in the
saturation phase of bench/intents.py). After a warm-up, for one window (the open loop, then until
every intent of it is settled) the script reads:

- user+system CPU of the api processes, of the outbox-worker processes, of the load generator, of
  the PostgreSQL backends serving the api processes and of those serving the workers (a backend is
  matched to its process by its client port), and of the server's own processes (WAL writer,
  checkpointer, autovacuum: shared with whatever else runs on the server);
- pg_stat_statements of the benchmark's database (differences of calls and execution time per
  statement, the benchmark's own queries left out): statements and server milliseconds per request.

Everything is divided by the requests answered in the window. CPU per request is what the machine's
load distorts least (a busy core stretches time, not work); the load average is printed beside it.

`--variant NAME=SETTING=VALUE` (repeatable) adds a variant that runs with `ALTER DATABASE ... SET
SETTING = VALUE` (the processes start after it, so every connection has it); `--ref REF` adds the api
of git ref REF (its `src` by `git archive`, as `bench/intents.py --ab` does). Variants run in
alternating order round after round (ABBA) on the same database.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.http_load import OpenLoopResult, intents_open_loop  # noqa: E402
from bench.intents import (  # noqa: E402
    Setup,
    drop_database,
    export_tree,
    make_database,
    setup,
    start_api,
    stop,
    wait_http,
    workers,
)
from tests.support.processes import PaymanagerProcess  # noqa: E402

from paymanager.application.services.use_cases import REQUESTS_PER_SEC_MAX, set_rate_limit  # noqa: E402

MONITOR_APP = "bench-budget"
# Settings of every variant (--track-planning adds pg_stat_statements.track_planning).
BASE_SETTINGS: dict[str, str] = {}
WARMUP_S = 3.0
# Statements of this script (the settled count it polls, the readings themselves): not the system's.
OWN_STATEMENTS = ("pg_stat_statements", "pg_stat_activity", "count(*) FROM intent", "ALTER DATABASE")


@dataclass
class Variant:
    name: str
    pythonpath: str | None = None
    settings: dict[str, str] = field(default_factory=dict)


@dataclass
class Reading:
    cpu_s: dict[str, float]
    statements: dict[tuple[int, int, bool], tuple[str, int, float]]


def _process_cpu_s(pid: int) -> float:
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return float(times.user + times.system)


def _client_ports(process: PaymanagerProcess) -> set[int]:
    try:
        return {c.laddr.port for c in psutil.Process(process.proc.pid).net_connections(kind="tcp")}
    except psutil.Error:
        return set()


async def read(
    monitor: asyncpg.Connection, apis: list[PaymanagerProcess], procs: list[PaymanagerProcess]
) -> Reading:
    api_ports = set().union(*(_client_ports(p) for p in apis))
    worker_ports = set().union(*(_client_ports(p) for p in procs))
    cpu: dict[str, float] = {
        "api processes": sum(_process_cpu_s(p.proc.pid) for p in apis),
        "outbox-worker processes": sum(_process_cpu_s(p.proc.pid) for p in procs),
        "PostgreSQL, the api's backends": 0.0,
        "PostgreSQL, the workers' backends": 0.0,
        "PostgreSQL, server processes": 0.0,
    }
    rows = await monitor.fetch(
        "SELECT pid, backend_type, datname = current_database() AS ours, client_port"
        " FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
    )
    for row in rows:
        if row["backend_type"] != "client backend":
            cpu["PostgreSQL, server processes"] += _process_cpu_s(row["pid"])
        elif row["ours"] and row["client_port"] in api_ports:
            cpu["PostgreSQL, the api's backends"] += _process_cpu_s(row["pid"])
        elif row["ours"] and row["client_port"] in worker_ports:
            cpu["PostgreSQL, the workers' backends"] += _process_cpu_s(row["pid"])
    statements = {
        (r["queryid"], r["userid"], r["toplevel"]): (r["query"], r["calls"], r["total_time"])
        for r in await monitor.fetch(
            "SELECT queryid, userid, toplevel, query, calls, total_exec_time + total_plan_time AS total_time"
            " FROM pg_stat_statements"
            " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
    }
    return Reading(cpu, statements)


async def settled(monitor: asyncpg.Connection) -> int:
    return int(
        await monitor.fetchval(
            "SELECT count(*) FROM intent WHERE channel = 'internal-p2p' AND status = 'settled'"
        )
    )


async def wait_settled(monitor: asyncpg.Connection, target: int, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while await settled(monitor) < target:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{await settled(monitor)} of {target} intents settled after {timeout_s} s")
        await asyncio.sleep(0.25)


@dataclass
class Window:
    requests: int
    cpu_ms: dict[str, float]
    statements_per_request: float
    server_ms_per_request: float
    top: list[tuple[str, float, float, float]]  # query, calls per request, mean us, us per request
    load: float
    p50_ms: float
    p99_ms: float
    waits: Counter[str]


WAIT_SAMPLE_S = 0.02


async def sample_waits(url: str, apis: list[PaymanagerProcess], stop: asyncio.Event) -> Counter[str]:
    """What the api's backends are doing while a statement of theirs runs, sampled every
    WAIT_SAMPLE_S until `stop`: `running`, or the wait event with the statement's first words."""
    ports = set().union(*(_client_ports(p) for p in apis))
    seen: Counter[str] = Counter()
    conn = await asyncpg.connect(url, server_settings={"application_name": MONITOR_APP})
    try:
        while not stop.is_set():
            for row in await conn.fetch(
                "SELECT client_port, wait_event_type, wait_event, left(query, 40) AS query"
                " FROM pg_stat_activity WHERE datname = current_database() AND state = 'active'"
                " AND pid <> pg_backend_pid()"
            ):
                if row["client_port"] not in ports:
                    continue
                if row["wait_event_type"] is None:
                    seen["running"] += 1
                else:
                    what = " ".join(row["query"].split())
                    seen[f"{row['wait_event_type']}:{row['wait_event']} in {what}"] += 1
            await asyncio.sleep(WAIT_SAMPLE_S)
    finally:
        await conn.close()
    return seen


async def one_window(s: Setup, url: str, variant: Variant, n_api: int, rate: int, seconds: float) -> Window:
    monitor = await asyncpg.connect(url, server_settings={"application_name": MONITOR_APP})
    try:
        database = url.rsplit("/", 1)[1]
        await monitor.execute(f'ALTER DATABASE "{database}" RESET ALL')
        for name, value in {**BASE_SETTINGS, **variant.settings}.items():
            await monitor.execute(f'ALTER DATABASE "{database}" SET {name} = {value}')
        apis = [start_api(url, variant.pythonpath) for _ in range(n_api)]
        procs = workers(url, 2)
        pairs = [(str(payer), str(payee)) for payer, payee in s.pairs]
        ports = [port for port, _ in apis]
        try:
            for port, process in apis:
                await wait_http(port, process)
            await intents_open_loop(ports, s.shop.id, s.shop_secret, pairs, rate, WARMUP_S)
            await wait_settled(monitor, await _confirmed_or_settled(monitor))
            before_settled = await settled(monitor)
            before = await read(monitor, [p for _, p in apis], procs)
            load = os.getloadavg()[0]
            stop_sampling = asyncio.Event()

            async def load_then_stop() -> OpenLoopResult:
                try:
                    return await intents_open_loop(ports, s.shop.id, s.shop_secret, pairs, rate, seconds)
                finally:
                    stop_sampling.set()

            waits, r = await asyncio.gather(
                sample_waits(url, [p for _, p in apis], stop_sampling), load_then_stop()
            )
            done = before_settled + r.warmup_intents + r.intents
            await wait_settled(monitor, done)
            after = await read(monitor, [p for _, p in apis], procs)
            requests = 2 * (done - before_settled)
            if r.errors:
                raise RuntimeError(f"{r.errors} requests failed: lower --rate")
        finally:
            stop([p for _, p in apis] + procs)
        await monitor.execute(f'ALTER DATABASE "{database}" RESET ALL')
    finally:
        await monitor.close()
    cpu_ms = {k: (after.cpu_s[k] - before.cpu_s[k]) * 1000 / requests for k in after.cpu_s}
    # The generator times only its measured phase (the 1 s warm-up of each open loop is not in it).
    cpu_ms["load generator"] = r.generator_cpu_ms
    rows = []
    for key, (query, calls, total_ms) in after.statements.items():
        old = before.statements.get(key, ("", 0, 0.0))
        dcalls, dms = calls - old[1], total_ms - old[2]
        if dcalls <= 0 or any(own in query for own in OWN_STATEMENTS):
            continue
        rows.append(
            (" ".join(query.split())[:90], dcalls / requests, dms * 1000 / dcalls, dms * 1000 / requests)
        )
    rows.sort(key=lambda row: -row[3])
    return Window(
        requests,
        cpu_ms,
        sum(row[1] for row in rows),
        sum(row[3] for row in rows) / 1000,
        rows,
        load,
        r.p50_ms,
        r.p99_ms,
        waits,
    )


async def _confirmed_or_settled(monitor: asyncpg.Connection) -> int:
    return int(
        await monitor.fetchval(
            "SELECT count(*) FROM intent"
            " WHERE channel = 'internal-p2p' AND status IN ('confirmed', 'settled')"
        )
    )


def show(variant: str, windows: list[Window], top_n: int) -> None:
    print(
        f"== {variant}: {len(windows)} window(s), medians;"
        f" loads {', '.join(f'{w.load:.1f}' for w in windows)}"
    )
    print(f"   requests per window {', '.join(str(w.requests) for w in windows)};"
          f" p50 {statistics.median(w.p50_ms for w in windows):.1f} ms,"
          f" p99 {statistics.median(w.p99_ms for w in windows):.1f} ms")  # fmt: skip
    total = 0.0
    for name in windows[0].cpu_ms:
        value = statistics.median(w.cpu_ms[name] for w in windows)
        total += value
        print(f"   CPU ms per request  {name:36s} {value:6.3f}")
    print(f"   CPU ms per request  {'total':36s} {total:6.3f}")
    print(f"   statements per request {statistics.median(w.statements_per_request for w in windows):.2f},"
          " server time (execution, + planning when tracked)"
          f" {statistics.median(w.server_ms_per_request for w in windows):.3f} ms per request")  # fmt: skip
    waits = windows[-1].waits
    print(f"   the api's active backends, {sum(waits.values())} samples (last window):")
    for what, n in waits.most_common(6):
        print(f"   {100 * n / max(sum(waits.values()), 1):5.1f}%  {what}")
    print("   top statements (last window): calls/req  mean us  us/req  statement")
    for query, per_req, mean_us, us_req in windows[-1].top[:top_n]:
        print(f"   {per_req:9.2f} {mean_us:8.0f} {us_req:7.0f}  {query}")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--rate", type=int, default=150, help="Open-loop requests/s (create + confirm count 2)."
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="Seconds of each measured window.")
    parser.add_argument("--rounds", type=int, default=2, help="Windows per variant, in ABBA order.")
    parser.add_argument("--apis", type=int, default=2, help="api processes beside the 2 outbox-workers.")
    parser.add_argument("--top", type=int, default=16, help="Statements listed per variant.")
    parser.add_argument("--ref", help="Also run the api of this git ref (the workers stay this tree's).")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=SETTING=VALUE",
                        help="Also run with a database-level setting,"
                        " e.g. custom=plan_cache_mode=force_custom_plan.")  # fmt: skip
    parser.add_argument("--track-planning", action="store_true",
                        help="Count planning in each statement's server time (every variant).")  # fmt: skip
    args = parser.parse_args()
    if args.track_planning:
        BASE_SETTINGS["pg_stat_statements.track_planning"] = "on"
    variants = [Variant("this tree")]
    for spec in args.variant:
        name, setting, value = spec.split("=", 2)
        variants.append(Variant(name, settings={setting: value}))
    print(f"load average at start: {os.getloadavg()[0]:.1f} (2 cores, shared)")
    url = await make_database()
    try:
        with tempfile.TemporaryDirectory(prefix="pm-bench-budget-") as tmp:
            if args.ref:
                variants.append(Variant(f"api of {args.ref}", pythonpath=export_tree(args.ref, Path(tmp))))
            s = await setup(url)
            async with s.payments.pool.acquire() as conn:
                await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                await set_rate_limit(conn, s.shop.id, REQUESTS_PER_SEC_MAX)
            figures: dict[str, list[Window]] = {v.name: [] for v in variants}
            for round_ in range(args.rounds):
                for variant in variants if round_ % 2 == 0 else list(reversed(variants)):
                    window = await one_window(s, url, variant, args.apis, args.rate, args.seconds)
                    figures[variant.name].append(window)
                    print(f"   round {round_ + 1} {variant.name}: {window.requests} requests,"
                          f" load {window.load:.1f},"
                          f" CPU {sum(window.cpu_ms.values()):.2f} ms/req")  # fmt: skip
            print(
                f"{args.apis} api process(es) + 2 outbox-worker, {args.rate} req/s open loop,"
                f" {args.seconds:.0f} s windows:"
            )
            for name, windows in figures.items():
                show(name, windows, args.top)
            await s.components.close()
            await s.payments.pool.close()
        print(f"load average at end: {os.getloadavg()[0]:.1f}")
    finally:
        await drop_database(url)


if __name__ == "__main__":
    asyncio.run(main())
