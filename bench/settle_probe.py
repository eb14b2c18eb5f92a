"""Phase 3 of bench/intents.py taken apart: what bounds 2 `outbox-worker` processes draining a backlog.

Run: `.venv/bin/python bench/settle_probe.py --count 3000 --rounds 3 --variant a= --variant b=FEE=grouped`
(`--variant NAME=VAR=value,VAR=value`; `NAME=` alone: phase 3 as it is.)

Each variant is a set of environment variables for the worker processes (on top of phase 3's). Round
after round, in alternating order, every variant drains a fresh backlog of `--count` confirmed intents
and prints:
- the rate timed as phase 3 does (from the first settlement) and from the second process's first
  settlement (both processes running) to the end;
- when each process finished its start-up (the reconciler included) and settled first, relative to the
  first settlement;
- the settlement groups (one `settlement.created_at` per group and process): how many, their sizes;
- with `--sample`, what PostgreSQL's backends of the database were doing, sampled from
  `pg_stat_activity` every 10 ms while draining: the mean number of backends per state / wait event.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import json
import os
import statistics
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import intents  # noqa: E402
from tests.support.processes import PaymanagerProcess  # noqa: E402

from paymanager.application.intents import create as create_intent  # noqa: E402
from paymanager.application.intents.confirm import confirm_intent  # noqa: E402
from paymanager.application.intents.events import Pending  # noqa: E402
from paymanager.domain.channels import ChannelName, FeeRule  # noqa: E402


def parse_variant(text: str) -> tuple[str, dict[str, str]]:
    name, _, rest = text.partition("=")
    env = dict(pair.split("=", 1) for pair in rest.split(",") if pair)
    return name, env


async def sample(url: str, stop: asyncio.Event, into: collections.Counter[str]) -> int:
    """Counts backends of the database per state and wait event every 10 ms until `stop`; samples taken."""
    conn = await asyncpg.connect(url)
    taken = 0
    try:
        while not stop.is_set():
            rows = await conn.fetch(
                "SELECT state, wait_event_type, wait_event, left(query, 40) AS q FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                " AND backend_type = 'client backend'"
            )
            taken += 1
            for r in rows:
                if r["state"] == "active":
                    what = f"active {r['wait_event_type'] or 'CPU'}:{r['wait_event'] or '-'}"
                    into[what] += 1
                    if r["wait_event_type"] == "Lock":
                        into[f"   lock wait in: {r['q']}"] += 1
                else:
                    into[f"{r['state']} {r['wait_event'] or ''}"] += 1
            await asyncio.sleep(0.01)
    finally:
        await conn.close()
    return taken


def startup_done(process: PaymanagerProcess) -> datetime | None:
    """When the process finished its start-up step of the workers (its log, debug level)."""
    for line in process.output.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("event") == "start-up step done" and record.get("step", "").startswith(
            "start the work"
        ):
            return datetime.fromisoformat(record["timestamp"])
    return None


class _ShardOf:
    """Stands in for FEE_SHARDS in `intent_id.int % FEE_SHARDS`: the shard the experiment chose."""

    def __init__(self) -> None:
        self.shard = 0

    def __rmod__(self, other: int) -> int:
        return self.shard


async def make_backlog(s: intents.Setup, n: int, fee: str) -> None:
    """`n` confirmed p2p intents, as `intents.backlog`; `fee`: "random" (as the api: one of the 64 fee
    shards at random), "one" (every fee on shard 0), "grouped" (intent i on shard (i // 25) % 64: one
    shard per settlement group of 25, so groups in flight share none) or "zero" (no fee, so no fee
    leg and no fee shard to lock)."""
    registry = s.payments.channels._channels
    p2p = registry[ChannelName.INTERNAL_P2P]
    shards = create_intent.FEE_SHARDS
    chosen = _ShardOf()
    if fee == "zero":
        registry[ChannelName.INTERNAL_P2P] = dataclasses.replace(p2p, fee=FeeRule())
    elif fee in ("one", "grouped"):
        create_intent.FEE_SHARDS = chosen  # type: ignore[assignment]
    try:
        for start in range(0, n, intents.BATCH):
            async with s.payments.pool.acquire() as conn, conn.transaction():
                for i in range(start, min(n, start + intents.BATCH)):
                    chosen.shard = (i // 25) % shards if fee == "grouped" else 0
                    payer, payee = s.pairs[i % len(s.pairs)]
                    row = await create_intent.create_intent(
                        s.payments, conn, s.shop,
                        create_intent.IntentRequest("internal-p2p", 100, "THB", payer, payee), [],
                    )  # fmt: skip
                    await confirm_intent(s.payments, conn, s.shop, row.id, Pending())
    finally:
        registry[ChannelName.INTERNAL_P2P] = p2p
        create_intent.FEE_SHARDS = shards


async def run_round(
    s: intents.Setup, url: str, n: int, env: dict[str, str], sampling: bool
) -> dict[str, Any]:
    pool = s.payments.pool
    env = dict(env)
    await make_backlog(s, n, env.pop("FEE", "random"))
    processes = int(env.pop("PROCESSES", "2"))
    before = await intents.settled(pool)
    t_launch = await pool.fetchval("SELECT clock_timestamp()")
    procs = intents.workers(url, processes, **{**env, "LOG_LEVEL": "debug"})
    counts: collections.Counter[str] = collections.Counter()
    stop = asyncio.Event()
    try:
        await intents.drain(pool, before + 1, intents.settled)
        first = await intents.settled(pool)
        cpu = (sum(intents.cpu_seconds(p) for p in procs), intents.postgres_cpu_seconds(),
               intents.machine_busy_seconds())  # fmt: skip
        sampler = asyncio.create_task(sample(url, stop, counts)) if sampling else None
        seconds = await intents.drain(pool, before + n, intents.settled)
        stop.set()
        taken = await sampler if sampler is not None else 0
        workers_cores = (sum(intents.cpu_seconds(p) for p in procs) - cpu[0]) / seconds
        pg_cores = (intents.postgres_cpu_seconds() - cpu[1]) / seconds
        machine_cores = (intents.machine_busy_seconds() - cpu[2]) / seconds
        started = [startup_done(p) for p in procs]
    finally:
        stop.set()
        intents.stop(procs)
    rows = await pool.fetch(
        "SELECT s.settled_by, s.created_at, count(*) AS n"
        " FROM settlement s JOIN intent i ON i.id = s.intent_id"
        " WHERE i.channel = 'internal-p2p' AND s.created_at > $1 GROUP BY 1, 2 ORDER BY 2",
        t_launch,
    )
    t0 = rows[0]["created_at"]
    by_process: dict[str, list[Any]] = collections.defaultdict(list)
    for r in rows:
        by_process[r["settled_by"]].append(r)
    firsts = sorted(rs[0]["created_at"] for rs in by_process.values())
    last = rows[-1]["created_at"]
    both_from = firsts[-1]
    after_both = sum(r["n"] for r in rows if r["created_at"] >= both_from)
    both_s = (last - both_from).total_seconds()
    sizes = [r["n"] for r in rows]
    return {
        "rate": (before + n - first) / seconds,
        "seconds": seconds,
        "rate_both": after_both / both_s if both_s > 0 else float("nan"),
        "second_first_ms": (both_from - t0).total_seconds() * 1000,
        "startups_ms": [round((t - t0).total_seconds() * 1000) if t is not None else None for t in started],
        "per_process": [len(rs) and sum(r["n"] for r in rs) for rs in by_process.values()],
        "groups": len(rows),
        "size_median": statistics.median(sizes),
        "size_mean": statistics.mean(sizes),
        "cores": (workers_cores, pg_cores, machine_cores),
        "waits": {k: v / taken for k, v in counts.most_common(12)} if taken else {},
    }


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=3_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variant", action="append", required=True, help="NAME=VAR=value,VAR=value")
    parser.add_argument("--sample", action="store_true", help="Sample pg_stat_activity while draining.")
    args = parser.parse_args()
    variants = [parse_variant(v) for v in args.variant]
    print(f"load average at start: {os.getloadavg()[0]:.1f}; {psutil.cpu_count()} cores")
    url = await intents.make_database()
    results: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in variants}
    try:
        s = await intents.setup(url)
        for r in range(args.rounds):
            for name, env in variants if r % 2 == 0 else list(reversed(variants)):
                res = await run_round(s, url, args.count, env, args.sample)
                results[name].append(res)
                w, p, m = res["cores"]
                print(
                    f"{name:10s} {res['rate']:6.0f}/s ({res['seconds']:.2f} s)"
                    f"  both running {res['rate_both']:6.0f}/s"
                    f"  2nd process from {res['second_first_ms']:5.0f} ms,"
                    f" start-ups done at {res['startups_ms']} ms  per process {res['per_process']}"
                    f"  groups {res['groups']} (median {res['size_median']}, mean {res['size_mean']:.1f})"
                    f"  cores w {w:.2f} pg {p:.2f} all {m:.2f}  load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
                for k, v in res["waits"].items():
                    print(f"      {v:5.2f}  {k}")
        print("medians:")
        for name, rs in results.items():
            print(
                f"{name:10s} {statistics.median(r['rate'] for r in rs):6.0f}/s"
                f"  both running {statistics.median(r['rate_both'] for r in rs):6.0f}/s"
            )
        await s.payments.pool.close()
    finally:
        await intents.drop_database(url)


if __name__ == "__main__":
    asyncio.run(main())
