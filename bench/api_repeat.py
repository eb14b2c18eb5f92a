"""The api's latency at one rate beside 2 outbox workers, repeated, with each process's CPU per request.

Run: `.venv/bin/python bench/api_repeat.py --rate 300 --runs 6 --seconds 8`
(optionally `--ref REF` to run the api of git ref REF instead of this tree's, `--py-spy FILE` to
profile the api during the second run). One database, one `api` process with a pool of 20 and 2
`outbox-worker` processes, as phase 4 of bench/intents.py; each run is that phase at one rate
(1 s warm-up, then the measured seconds, then the settlement backlog drained). Printed per run:
p50/p99, and CPU milliseconds per answered request of the api process, of every PostgreSQL process
and of the two outbox workers, measured over the run (warm-up and drain included).
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
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.http_load import intents_open_loop  # noqa: E402
from bench.intents import (  # noqa: E402
    cpu_seconds,
    drain,
    drop_database,
    export_tree,
    make_database,
    postgres_cpu_seconds,
    settled,
    setup,
    start_api,
    stop,
    wait_http,
    workers,
)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=int, default=300, help="Requests per second (create + confirm).")
    parser.add_argument("--runs", type=int, default=6, help="Measured runs, one after the other.")
    parser.add_argument("--seconds", type=float, default=8.0, help="Measured seconds per run.")
    parser.add_argument("--ref", help="Run the api of this git ref instead of this tree's.")
    parser.add_argument("--workers", type=int, default=2, help="outbox-worker processes beside the api.")
    parser.add_argument("--idle-seconds", type=float, default=0, help="First measure the idle CPU this long.")
    parser.add_argument("--py-spy", metavar="FILE", help="py-spy record the api during run 2 into FILE.")
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.1f}; {time.strftime('%H:%M:%S', time.gmtime())} UTC")
    url = await make_database()
    try:
        s = await setup(url)
        with tempfile.TemporaryDirectory(prefix="pm-bench-repeat-") as tmp:
            path = export_tree(args.ref, Path(tmp)) if args.ref else None
            port, api = start_api(url, path)
            procs = workers(url, args.workers)
            try:
                await wait_http(port, api)
                await runs(s, port, api, procs, args)
            finally:
                stop([api, *procs])
        await s.payments.pool.close()
        print(f"load average at end: {os.getloadavg()[0]:.1f}")
    finally:
        await drop_database(url)


async def postgres_cpu_by_client(pool, api, procs) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """CPU seconds so far of each PostgreSQL process, summed by who it serves: the api's backends,
    the workers' backends, this benchmark's, other databases' and the server's own processes."""
    ports = {}
    for name, p in [("api", api), *(("workers", w) for w in procs)]:
        for c in psutil.Process(p.proc.pid).net_connections(kind="tcp"):
            ports[c.laddr.port] = name
    rows = await pool.fetch(
        "SELECT pid, client_port, datname = current_database() AS ours, backend_type FROM pg_stat_activity"
    )
    sums: dict[str, float] = {}
    for row in rows:
        if row["backend_type"] != "client backend":
            who = "server"
        elif not row["ours"]:
            who = "other dbs"
        else:
            who = ports.get(row["client_port"], "bench")
        try:
            t = psutil.Process(row["pid"]).cpu_times()
        except psutil.Error:
            continue
        sums[who] = sums.get(who, 0.0) + t.user + t.system
    return sums


async def runs(s, port, api, procs, args) -> None:  # type: ignore[no-untyped-def]
    pool = s.payments.pool
    pairs = [(str(payer), str(payee)) for payer, payee in s.pairs]
    if args.idle_seconds:
        # What the processes burn with nothing to do (polls, heartbeats), in cores.
        cpu = (cpu_seconds(api), sum(cpu_seconds(p) for p in procs))
        by_client = await postgres_cpu_by_client(pool, api, procs)
        await asyncio.sleep(args.idle_seconds)
        after = await postgres_cpu_by_client(pool, api, procs)
        idle = {k: (v - by_client.get(k, 0.0)) / args.idle_seconds for k, v in sorted(after.items())}
        api_cores = (cpu_seconds(api) - cpu[0]) / args.idle_seconds
        workers_cores = (sum(cpu_seconds(p) for p in procs) - cpu[1]) / args.idle_seconds
        print(f" idle {args.idle_seconds:.0f} s, cores: api {api_cores:.3f}, workers {workers_cores:.3f},"
              f" PostgreSQL by client: {', '.join(f'{k} {v:.3f}' for k, v in idle.items())}")  # fmt: skip
    p99s = []
    print(" run  load  achieved  p50 ms  p99 ms  errors | CPU ms/req: api  postgres  workers  loadgen")
    for n in range(1, args.runs + 1):
        spy = None
        if args.py_spy and n == 2:
            spy = subprocess.Popen(  # noqa: ASYNC220 (started once, before the measured run)
                [str(Path(sys.executable).parent / "py-spy"), "record", "--rate", "200", "--pid",
                 str(api.proc.pid), "--output", args.py_spy, "--format", "raw", "--nonblocking"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
        load = os.getloadavg()[0]
        started_at = await pool.fetchval("SELECT now()")
        before = await settled(pool)
        cpu = (cpu_seconds(api), postgres_cpu_seconds(), sum(cpu_seconds(p) for p in procs))
        by_client = await postgres_cpu_by_client(pool, api, procs)
        r = await intents_open_loop(port, s.shop.id, s.shop_secret, pairs, args.rate, args.seconds)
        if procs:
            await drain(pool, before + r.warmup_intents + r.intents, settled, timeout_s=120)
        requests = 2 * (r.warmup_intents + r.intents) or 1
        api_ms = (cpu_seconds(api) - cpu[0]) * 1000 / requests
        pg_ms = (postgres_cpu_seconds() - cpu[1]) * 1000 / requests
        workers_ms = (sum(cpu_seconds(p) for p in procs) - cpu[2]) * 1000 / requests
        after = await postgres_cpu_by_client(pool, api, procs)
        # From confirm to settled, of the intents this run confirmed (the workers' added latency).
        lag = await pool.fetchrow(
            "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY finished_at - confirmed_at) AS p50,"
            " percentile_cont(0.99) WITHIN GROUP (ORDER BY finished_at - confirmed_at) AS p99"
            " FROM intent WHERE status = 'settled' AND confirmed_at >= $1",
            started_at,
        )
        split = ", ".join(
            f"{k} {(v - by_client.get(k, 0.0)) * 1000 / requests:.2f}" for k, v in sorted(after.items())
        )
        if spy is not None:
            spy.send_signal(2)
            spy.wait(30)
        p99s.append(r.p99_ms)
        print(f" {n:3d}  {load:4.1f}  {r.achieved:8.0f}  {r.p50_ms:6.1f}  {r.p99_ms:6.1f}  {r.errors:6d} |"
              f"      {api_ms:5.2f}  {pg_ms:8.2f}  {workers_ms:7.2f}  {r.generator_cpu_ms:7.2f}")  # fmt: skip
        print(f"      PostgreSQL CPU ms/req by client: {split}")
        if lag["p50"] is not None:
            print(f"      confirmed -> settled: p50 {lag['p50'].total_seconds() * 1000:.0f} ms,"
                  f" p99 {lag['p99'].total_seconds() * 1000:.0f} ms")  # fmt: skip
        await asyncio.sleep(1)
    print(f" p99 median {statistics.median(p99s):.1f} ms; runs at or under 25 ms: "
          f"{sum(p <= 25 for p in p99s)} of {len(p99s)}")  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())
