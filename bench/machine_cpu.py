"""The whole machine's CPU per job: the worker processes' and PostgreSQL's, by process accounting.

    .venv/bin/python bench/machine_cpu.py [--jobs 100000] [--rounds 4] [--workers 1,2]
    .venv/bin/python bench/machine_cpu.py --side [--seconds 5] [--rounds 2]

The first form drains `--jobs` no-op jobs (bench/jobs.py's worker and bulk enqueue) with each count
of worker processes in turn, alternating which goes first, and prints per job: the worker
processes' CPU (their user + system time, read when they have been reaped, less what starting and
stopping them costs with no job), PostgreSQL's (every
postgres process's, plus what the postmaster has reaped from backends that ended meanwhile), and
how busy the two figures kept the machine's cores. With two worker processes the machine is full;
what a job costs there is what bounds their throughput.

`--side` runs one worker serving only bench/jobs.py's rate-limited and globally limited queues
(`--beside-limited`'s: 100/s, and 5 at once of 5 ms jobs) for `--seconds`, and prints the same per
side job: what a job of a limited queue costs, beside the no-op jobs of a plain one.

CPU times come from /proc (clock ticks, 10 ms): a run must last seconds for them to read.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent))

import jobs as jb  # bench/jobs.py, beside this file

TICKS_PER_S = os.sysconf("SC_CLK_TCK")
CORES = os.cpu_count() or 1
POSTMASTER_PID = Path("/var/run/postgresql/15-main.pid")


def _ticks(pid: int) -> tuple[int, int]:
    """(own user + system, reaped children's user + system) of `pid`, in clock ticks."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])


def postgres_cpu_s() -> float:
    """CPU seconds of every postgres process now, and of the backends the postmaster reaped."""
    postmaster = int(POSTMASTER_PID.read_text().split()[0]) if POSTMASTER_PID.exists() else -1
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() != "postgres":
                continue
            own, children = _ticks(int(entry.name))
        except OSError:
            continue  # ended while read
        total += own + (children if int(entry.name) == postmaster else 0)
    return total / TICKS_PER_S


def process_cpu_s(pid: int) -> float:
    """CPU seconds of the live process `pid` itself."""
    return _ticks(pid)[0] / TICKS_PER_S


def reaped_children_cpu_s() -> float:
    times = os.times()
    return times.children_user + times.children_system


def line(label: str, n: int, seconds: float, worker_s: float, postgres_s: float) -> str:
    return (
        f"{label}: {n / seconds:8.0f} jobs/s  worker {1e6 * worker_s / n:6.1f} us/job  "
        f"postgres {1e6 * postgres_s / n:6.1f} us/job  total {1e6 * (worker_s + postgres_s) / n:6.1f}  "
        f"cores busy {(worker_s + postgres_s) / seconds / CORES:.0%}"
    )


def start_and_stop_s(dsn: str, workers: int) -> float:
    """The worker processes' CPU seconds for a run with no job: their start (imports, connections)
    and stop, which a drain's figure leaves out."""
    asyncio.run(jb.reset("ours", dsn))
    worker0 = reaped_children_cpu_s()
    jb.process_run("ours", dsn, workers)
    return reaped_children_cpu_s() - worker0


def drains(dsn: str, n: int, rounds: int, counts: list[int]) -> None:
    overhead = {w: min(start_and_stop_s(dsn, w) for _ in range(2)) for w in counts}
    print(
        "# worker processes' own start and stop, left out: "
        + ", ".join(f"{w} process(es) {s:.2f} s" for w, s in overhead.items()),
        flush=True,
    )
    for r in range(rounds):
        for workers in counts if r % 2 == 0 else list(reversed(counts)):
            asyncio.run(jb.reset("ours", dsn))
            asyncio.run(jb.ours_bulk(dsn, n))
            worker0, postgres0 = reaped_children_cpu_s(), postgres_cpu_s()
            seconds, _ = jb.process_run("ours", dsn, workers)
            worker_s = reaped_children_cpu_s() - worker0 - overhead[workers]
            postgres_s = postgres_cpu_s() - postgres0
            label = f"round {r + 1}, {workers} worker process(es)"
            print(line(label, n, seconds, worker_s, postgres_s), flush=True)


async def completed_jobs(dsn: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM job WHERE state = 'completed'"))
    finally:
        await conn.close()


def side_jobs(dsn: str, seconds: float, rounds: int) -> None:
    for r in range(rounds):
        asyncio.run(jb.reset("ours", dsn))
        asyncio.run(jb.fill_limited_queues(dsn))
        proc = jb.spawn("ours", dsn, "drain", beside=True)
        worker0, postgres0 = process_cpu_s(proc.pid), postgres_cpu_s()
        jb.go([proc])
        started = time.perf_counter()
        time.sleep(seconds)
        worker_s, postgres_s = process_cpu_s(proc.pid) - worker0, postgres_cpu_s() - postgres0
        elapsed = time.perf_counter() - started
        jb.go([proc])
        jb.results([proc])
        n = asyncio.run(completed_jobs(dsn))
        print(line(f"round {r + 1}, side jobs only ({n})", n, elapsed, worker_s, postgres_s), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--workers", default="1,2", help="worker process counts, comma-separated")
    parser.add_argument("--side", action="store_true", help="the limited queues' side jobs alone")
    parser.add_argument("--seconds", type=float, default=5.0, help="how long --side runs per round")
    args = parser.parse_args()
    dsn = asyncio.run(jb.create_database("ours"))
    try:
        print(f"# machine CPU per job; load average {os.getloadavg()[0]:.1f}", flush=True)
        if args.side:
            side_jobs(dsn, args.seconds, args.rounds)
        else:
            drains(dsn, args.jobs, args.rounds, [int(w) for w in args.workers.split(",")])
        print(f"# load average at the end {os.getloadavg()[0]:.1f}")
    finally:
        asyncio.run(jb.drop_database(dsn))


if __name__ == "__main__":
    main()
