"""What the limited queues cost a plain queue, read within one drain.

    .venv/bin/python bench/beside_toggle.py [--jobs 600000] [--half 0.1] [--drains 2]
        [--only rated|capped|plain|none]

One worker process drains `--jobs` no-op jobs of the plain queue while serving bench/jobs.py's
rate-limited and globally limited queues (`--beside-limited`'s, side jobs of BENCH_SIDE_JOB_MS, 5 by
default). This process pauses the limited queues (the pause a handler's RateLimitedError asks for)
in every second period of `--half` seconds, so they run in one half of each pair and not in the
other; the worker counts the plain queue's completions per 10 ms. Printed per drain: the plain
queue's jobs in the halves with the limited queues over those without (their sums, the edges of
each half left out: a side job started at the end of a half runs into the next, so `--half` must be
several side jobs long), the geometric mean of the pairs with its standard error, and how many side
jobs ran.

`--only plain`, the control: the same side jobs in a queue without limits (bench/jobs.py's
SIDE_PLAIN, held to about as many side jobs a second by its per-process concurrency), paused and
resumed by the operator's pause. What it costs the plain queue is the side jobs' own work, which
no limit adds to; the limited queues' figure less this one is what the limits cost. `--only none`,
the null: the same pauses and resumes with the side queue empty, which should read 1.

Why not two runs side by side (bench/jobs_ab.py): this VM's speed moves by a third in spells that
last seconds, longer than a run, so alternate runs of one setting read 0.93 and 1.00 over 48
rounds each; halves a fraction of a second apart see the same machine.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent))

import jobs as jb  # bench/jobs.py, beside this file

BUCKET_S = 0.01
# The part of each half left out at both ends (a share of the half, and at least a side job's
# duration): the limited queues' jobs started at the end of a half still run into the next.
EDGE = 0.2


async def counting_worker(dsn: str, side_plain: bool) -> dict[str, int]:
    """bench/jobs.py's worker beside the side queues, counting the plain queue's jobs per bucket."""
    buckets: collections.Counter[int] = collections.Counter()

    def count() -> None:
        buckets[int(time.time() / BUCKET_S)] += 1

    await jb.ours_worker(dsn, "drain", on_noop=count, limited=not side_plain, side_plain=side_plain)
    return {str(k): v for k, v in buckets.items()}


def worker_main(dsn: str, side_plain: bool) -> None:
    from paymanager.logging import configure_logging

    configure_logging("warning", "json")  # stdout carries the protocol; logs go to stderr
    print(json.dumps(jb.run_on_loop(counting_worker(dsn, side_plain))), flush=True)


def toggled_drain(dsn: str, half: float, side_plain: bool) -> tuple[dict[int, int], float, float]:
    """Start the worker at a whole second, pause the side queues in every second half until the
    plain queue is empty; the worker's buckets, and the drain's start and end (epoch seconds)."""
    proc = subprocess.Popen(
        [sys.executable, __file__, "worker", dsn, "plain" if side_plain else "limited"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        raise RuntimeError("the worker did not start")
    started, ended = asyncio.run(toggle(dsn, half, proc.stdin, side_plain))
    proc.stdin.write("stop\n")
    proc.stdin.flush()
    buckets = {int(k): v for k, v in json.loads(proc.stdout.readline()).items()}
    proc.wait(timeout=60)
    return buckets, started, ended


async def toggle(dsn: str, half: float, worker: IO[str], side_plain: bool) -> tuple[float, float]:
    from paymanager.jobs._store import pause_queue_for
    from paymanager.jobs.admin import pause_queue, resume_queue

    conn = await asyncpg.connect(dsn)
    try:
        await asyncio.sleep(1 - time.time() % 1)
        worker.write("go\n")
        worker.flush()
        started = time.time()
        paused_until = 0.0
        plain_paused = False
        while await conn.fetchval(jb.OURS_PLAIN_BUSY):
            now = time.time()
            into_pair = now % (2 * half)
            if side_plain:
                # The operator's pause keeps the queue on the plain claims; resuming wakes the worker.
                if (into_pair >= half) != plain_paused:
                    plain_paused = not plain_paused
                    await (pause_queue if plain_paused else resume_queue)(conn, jb.SIDE_PLAIN)
            elif into_pair >= half and now >= paused_until:
                paused_until = now + 2 * half - into_pair
                for queue in (jb.RATED, jb.CAPPED):
                    await pause_queue_for(conn, queue=queue, pause_ms=int((2 * half - into_pair) * 1000))
            await asyncio.sleep(jb.DRAIN_POLL_S)
        return started, time.time()
    finally:
        await conn.close()


def edge_s(half: float) -> float:
    return max(EDGE * half, 1.2 * jb.side_job_s())


def read_pairs(
    buckets: dict[int, int], started: float, ended: float, half: float
) -> list[tuple[float, float]]:
    """(jobs a second with the limited queues, without) per whole pair of halves of the drain."""
    edge = edge_s(half)

    def rate(a: float, b: float) -> float:
        lo, hi = round((a + edge) / BUCKET_S), round((b - edge) / BUCKET_S)
        return sum(buckets.get(i, 0) for i in range(lo, hi)) / ((hi - lo) * BUCKET_S)

    pairs = []
    t = math.ceil(started)
    # The last pair is left out: the queue runs dry in it.
    while t + 4 * half <= ended:
        pairs.append((rate(t, t + half), rate(t + half, t + 2 * half)))
        t += 2 * half
    return pairs


async def side_jobs_done(dsn: str) -> str:
    conn = await asyncpg.connect(dsn)
    try:
        done = await jb.side_jobs_completed(conn)
    finally:
        await conn.close()
    return ", ".join(f"{queue} {n}" for queue, n in done.items()) or "none"


async def fill_side_plain(dsn: str) -> None:
    from paymanager.jobs import NewJob, enqueue_many

    conn = await asyncpg.connect(dsn)
    try:
        jobs = [NewJob("side", {"i": i}, queue=jb.SIDE_PLAIN) for i in range(jb.SIDE_PLAIN_JOBS)]
        if jobs:
            await enqueue_many(conn, jobs)
    finally:
        await conn.close()


def report(pairs: list[tuple[float, float]], seconds: float, n: int) -> str:
    if len(pairs) < 2:
        return f"{n} plain jobs in {seconds:.1f} s: {len(pairs)} pairs, too few to read: raise --jobs"
    ratios = [math.log(on / off) for on, off in pairs if on > 0 and off > 0]
    mean = sum(ratios) / len(ratios)
    se = (sum((r - mean) ** 2 for r in ratios) / (len(ratios) - 1)) ** 0.5 / len(ratios) ** 0.5
    on_sum, off_sum = sum(p[0] for p in pairs), sum(p[1] for p in pairs)
    return (
        f"{n} plain jobs in {seconds:.1f} s ({n / seconds:.0f}/s), {len(pairs)} pairs: with / without the "
        f"side queues {on_sum / off_sum:.3f} (sums); geometric mean {math.exp(mean):.3f} "
        f"+- {math.exp(mean) * se:.3f}; {sum(r > 0 for r in ratios)} pairs above 1"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=600_000)
    parser.add_argument(
        "--half", type=float, default=0.1, help="seconds with, then without, the limited queues"
    )
    parser.add_argument("--drains", type=int, default=2)
    parser.add_argument(
        "--only",
        choices=("rated", "capped", "plain", "none"),
        help="fill one limited queue, the other empty; plain: the control, a side queue without limits;"
        " none: the null, plain's pauses and resumes with its queue empty",
    )
    args = parser.parse_args()
    if 2 * edge_s(args.half) >= 0.8 * args.half:
        parser.error(
            f"--half {args.half} leaves too little of each half beside side jobs of {jb.side_job_s():g} s"
        )
    # Enough side jobs that neither limited queue runs dry before the plain queue does.
    jb.RATED_JOBS, jb.CAPPED_JOBS = 10_000, 40_000
    if args.only == "rated":
        jb.CAPPED_JOBS = 0
    elif args.only == "capped":
        jb.RATED_JOBS = 0
    side_plain = args.only in ("plain", "none")
    if args.only == "none":
        jb.SIDE_PLAIN_JOBS = 0
    print(
        f"# {args.jobs} plain jobs a drain, halves of {args.half} s, side jobs of "
        f"{jb.side_job_s() * 1000:g} ms, side queues: {args.only or 'rated and capped'}; "
        f"load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    for _ in range(args.drains):
        dsn = asyncio.run(jb.create_database("ours"))
        try:
            asyncio.run(jb.ours_bulk(dsn, args.jobs))
            asyncio.run(fill_side_plain(dsn) if side_plain else jb.fill_limited_queues(dsn))
            buckets, started, ended = toggled_drain(dsn, args.half, side_plain)
            side = asyncio.run(side_jobs_done(dsn))
        finally:
            asyncio.run(jb.drop_database(dsn))
        print(report(read_pairs(buckets, started, ended, args.half), ended - started, args.jobs), flush=True)
        print(f"  side jobs completed: {side}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "worker":
        worker_main(sys.argv[2], sys.argv[3] == "plain")
    else:
        main()
