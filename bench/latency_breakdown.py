"""Where paymanager's enqueue-to-start latency goes, hop by hop, beside the floor in the same run.

    .venv/bin/python bench/latency_breakdown.py [--jobs 200] [--rounds 3]

Each round runs paymanager and then the floor of `bench/latency_floor.py` (a queue with nothing of
its own), in alternating order, with the same producer pace: a job every 20 ms into an idle worker,
as `bench/jobs.py --only latency` does. For paymanager the worker process records, per job, when the
NOTIFY reached it, when its claim statement went out and came back, and when the handler started;
printed as p50 in ms from the start of the producer's `enqueue` call, then the hops between them
(the p50 of each, then each hop's own p99: where the tail comes from).
The machine's commit time moves from minute to minute: read paymanager's figure against the floor
measured beside it. The worker's hooks wrap `Worker._on_available` and the `fetch` of its pinned
connections and of its listener (an idle worker claims on the LISTEN connection); the last line
says how many jobs each kind of connection claimed.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import asyncpg
import uvloop

import jobs as jobs_bench  # bench/jobs.py and bench/latency_floor.py, beside this file
import latency_floor
from paymanager.db.pool import create_pool
from paymanager.jobs import JobContext, Registry, Worker, WorkerOptions, _listener, _pinned, enqueue
from paymanager.jobs import worker as worker_module
from paymanager.jobs._queries import Q

GAP_S = latency_floor.GAP_S
QUEUE = "latency"
CLAIMS = (Q["job_claim"], Q["job_claim_queue"], Q["job_claim_batch"])
# Per round, how many jobs the worker claimed on which connection.
CLAIMED_ON: list[dict[str, int]] = []
# (label, mark) in the order of the path; each mark is epoch seconds, the call's start first.
MARKS = (
    ("producer's call returned", "returned"),
    ("NOTIFY reached the worker", "notified"),
    ("claim sent", "claim_sent"),
    ("claim returned", "claim_back"),
    ("handler started", "started"),
)


async def worker(dsn: str, jobs: int) -> None:
    """The worker process: print 'ready', run until `jobs` handlers started, print their marks."""
    last: dict[str, float] = {}
    by_job: dict[int, dict[str, float]] = {}
    claimed_on: dict[str, int] = {}
    on_available = worker_module.Worker._on_available

    def noting_available(self: Worker, queue: str) -> None:
        last["notified"] = time.time()
        on_available(self, queue)

    def noting(fetch: Any, where: str) -> Any:
        async def noting_fetch(self: Any, query: str, *args: Any) -> list[asyncpg.Record]:
            notified, sent = last.get("notified", 0.0), time.time()
            rows: list[asyncpg.Record] = await fetch(self, query, *args)
            if query in CLAIMS:
                back = time.time()
                for row in rows:
                    if row["claimed"]:
                        by_job[row["id"]] = {"notified": notified, "claim_sent": sent, "claim_back": back}
                        claimed_on[where] = claimed_on.get(where, 0) + 1
            return rows

        return noting_fetch

    worker_module.Worker._on_available = noting_available  # type: ignore[method-assign]
    _pinned.PinnedConnection.fetch = noting(_pinned.PinnedConnection.fetch, "pooled")  # type: ignore[method-assign]
    _listener.Listener.fetch = noting(_listener.Listener.fetch, "listener")  # type: ignore[method-assign]
    done = asyncio.Event()
    marks: list[dict[str, float]] = []

    async def handler(ctx: JobContext) -> None:
        marks.append({**ctx.payload, **by_job.get(ctx.id, {}), "started": time.time()})
        if len(marks) >= jobs:
            done.set()

    registry = Registry()
    registry.register("latency", handler, queue=QUEUE)
    pool = await create_pool(dsn, min_size=2, max_size=5)
    options = WorkerOptions(owner=f"breakdown-{os.getpid()}", lease_ms=30_000, heartbeat_interval_ms=10_000)
    engine = Worker(pool, dsn, registry, {QUEUE: 200}, options)
    await engine.start()
    print("ready", flush=True)
    await done.wait()
    await engine.stop(timeout_s=5)
    await pool.close()
    print("MARKS " + json.dumps(marks), flush=True)
    print("CLAIMED " + json.dumps(claimed_on), flush=True)


async def produce(dsn: str, jobs: int) -> dict[float, float]:
    """Enqueue `jobs` jobs GAP_S apart on one held connection; the return time of each call by its start."""
    returned: dict[float, float] = {}
    pool = await create_pool(dsn, min_size=1, max_size=1)
    async with pool.acquire() as conn:
        for i in range(jobs):
            started = time.time()
            await enqueue(conn, "latency", {"call": started, "i": i}, queue=QUEUE)
            returned[started] = time.time()
            await asyncio.sleep(GAP_S)
    await pool.close()
    return returned


def ours_round(dsn: str, jobs: int) -> dict[str, list[float]]:
    """Per mark, each job's time from its call's start (ms)."""
    child = subprocess.Popen(
        [sys.executable, __file__, "--worker", dsn, "--jobs", str(jobs)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    while not child.stdout.readline().startswith("ready"):
        pass
    time.sleep(0.5)  # let the worker go idle
    returned = uvloop.run(produce(dsn, jobs))
    marks: list[dict[str, float]] = []
    for line in child.stdout:
        if line.startswith("MARKS "):
            marks = json.loads(line[len("MARKS ") :])
        if line.startswith("CLAIMED "):
            CLAIMED_ON.append(json.loads(line[len("CLAIMED ") :]))
    child.wait(timeout=60)
    out: dict[str, list[float]] = {mark: [] for _, mark in MARKS}
    hops: list[list[float]] = []  # per job with every mark: the time of each hop (ms)
    for job in marks:
        job["returned"] = returned[job["call"]]
        for _, mark in MARKS:
            if mark in job:
                out[mark].append((job[mark] - job["call"]) * 1000)
        if all(mark in job for _, mark in MARKS):
            times = [job["call"], *(job[mark] for _, mark in MARKS)]
            hops.append([(b - a) * 1000 for a, b in itertools.pairwise(times)])
    for i, _ in enumerate(MARKS):
        out[f"hop{i}"] = [h[i] for h in hops]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--worker", metavar="DSN", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        uvloop.run(worker(args.worker, args.jobs))
        return
    print(f"# enqueue-to-start breakdown: {args.jobs} jobs {GAP_S * 1000:.0f} ms apart, {args.rounds} rounds")
    print("# p50 in ms from the start of the producer's call; the floor's round follows or precedes each")
    dsn = uvloop.run(jobs_bench.create_database("ours"))
    table = f"pm_latency_floor_{os.getpid()}"
    uvloop.run(latency_floor.run_sql(latency_floor.CREATE.format(t=table)))
    totals: list[tuple[float, float]] = []
    try:
        for r in range(args.rounds):
            ours: dict[str, list[float]] = {}
            floor: tuple[list[float], list[float], list[float]] = ([], [], [])
            for which in ("ours", "floor") if r % 2 == 0 else ("floor", "ours"):
                if which == "ours":
                    ours = ours_round(dsn, args.jobs)
                else:
                    floor = latency_floor.one_round(table, args.jobs)
            medians = {mark: statistics.median(ours[mark]) for _, mark in MARKS}
            print(
                f"round {r + 1}: paymanager " + "   ".join(f"{label} {medians[m]:.2f}" for label, m in MARKS)
            )
            hops = [b - a for a, b in zip([0.0, *medians.values()], medians.values(), strict=False)]
            print(
                "           hops "
                + " + ".join(f"{h:.2f}" for h in hops)
                + f"; p99 {latency_floor.percentile(ours['started'], 99):.2f}"
            )
            print(
                "       hops p99 "
                + " + ".join(
                    f"{latency_floor.percentile(ours[f'hop{i}'], 99):.2f}" for i, _ in enumerate(MARKS)
                )
            )
            calls, arrivals, claims = floor
            print(
                f"         floor producer's call {statistics.median(calls):.2f}"
                f"   NOTIFY {statistics.median(arrivals):.2f}   claimed {statistics.median(claims):.2f};"
                f" p99 {latency_floor.percentile(claims, 99):.2f}"
            )
            totals.append((medians["started"], statistics.median(claims)))
            print(f"           claimed on: {CLAIMED_ON[-1]}")
        print(
            "paymanager over the floor, p50 per round: "
            + ", ".join(
                f"{ours_p50:.2f} - {floor_p50:.2f} = {ours_p50 - floor_p50:+.2f} ms"
                for ours_p50, floor_p50 in totals
            )
        )
    finally:
        uvloop.run(latency_floor.run_sql(f"DROP TABLE {table}"))
        uvloop.run(jobs_bench.drop_database(dsn))


if __name__ == "__main__":
    main()
