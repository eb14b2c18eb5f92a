"""Retention of a backlog of completed jobs, from two trees alternating round by round.

    .venv/bin/python bench/prune_ab.py A B [--completed 300000] [--queues 3] [--waiting 20000]
                                           [--keep 5000] [--rounds 4]

A and B are source trees (a checkout, or `git worktree add /tmp/a REV`), each run on a database of
its own migrated by its own code (bench/jobs_ab.py's `tree_database`), so a tree whose indexes
differ is measured on its own schema. Each round fills both tables alike: `--completed` completed
jobs spread over `--queues` queues, finished one millisecond apart in id order, and `--waiting`
available jobs, then ANALYZE; then the tree's `admin.prune` keeps the newest `--keep` completed
jobs per queue (no age rule), in a child process on the tree's code, timed there. Printed per round:
seconds and microseconds per deleted job for each tree, and B/A; then the medians.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys

import asyncpg

from jobs_ab import Tree, ab_parser, round_order, tree_databases  # bench/jobs_ab.py, beside this file

# Run in a child process on the tree's own code: the pruner and statements of that tree.
_PRUNE = """
import asyncio, json, sys, time, asyncpg
from paymanager.jobs import Retention, admin

async def main() -> None:
    conn = await asyncpg.connect(sys.argv[1])
    try:
        started = time.perf_counter()
        deleted = await admin.prune(conn, Retention(completed_age_ms=None, completed_count=int(sys.argv[2])))
        print(json.dumps({"seconds": time.perf_counter() - started, "deleted": deleted}))
    finally:
        await conn.close()

asyncio.run(main())
"""


async def fill(dsn: str, completed: int, queues: int, waiting: int) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("TRUNCATE job")
        await conn.execute(
            "INSERT INTO job (queue, kind, payload, state, finalized_at)"
            " SELECT 'bench.q' || (i % $2), 'noop', '{}', 'completed', now() - ($1 - i) * interval '1 ms'"
            "   FROM generate_series(1, $1) AS i",
            completed,
            queues,
        )
        await conn.execute(
            "INSERT INTO job (queue, kind, payload, state)"
            " SELECT 'bench.q0', 'noop', '{}', 'available' FROM generate_series(1, $1)",
            waiting,
        )
        await conn.execute("ANALYZE job")
    finally:
        await conn.close()


def prune(tree: Tree, dsn: str, keep: int) -> tuple[float, int]:
    env = {**os.environ, "PYTHONPATH": os.path.join(tree.path, "src")}
    out = subprocess.run(
        [sys.executable, "-c", _PRUNE, dsn, str(keep)], env=env, check=True, capture_output=True, text=True
    ).stdout
    figures = json.loads(out.strip().splitlines()[-1])
    return float(figures["seconds"]), int(figures["deleted"])


def main() -> None:
    parser = ab_parser(__doc__)
    parser.add_argument("--completed", type=int, default=300_000)
    parser.add_argument("--queues", type=int, default=3)
    parser.add_argument("--waiting", type=int, default=20_000)
    parser.add_argument("--keep", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    trees = {"a": Tree.parse(args.a), "b": Tree.parse(args.b)}
    print(
        f"# {args.completed} completed jobs in {args.queues} queues, {args.waiting} waiting,"
        f" keep {args.keep} per queue, {args.rounds} rounds; A = {args.a}, B = {args.b};"
        f" load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    seconds: dict[str, list[float]] = {"a": [], "b": []}
    with tree_databases(trees) as dsns:
        for r in range(args.rounds):
            line = []
            for key in round_order(r):
                asyncio.run(fill(dsns[key], args.completed, args.queues, args.waiting))
                took, deleted = prune(trees[key], dsns[key], args.keep)
                seconds[key].append(took)
                per_job_us = took / max(deleted, 1) * 1e6
                line.append(f"{key.upper()} {took:.2f} s ({per_job_us:.1f} us/job, {deleted} deleted)")
            ratio = seconds["b"][-1] / seconds["a"][-1]
            print(f"  round {r + 1}: {', '.join(line)}; B/A {ratio:.2f}", flush=True)
    ratios = [b / a for a, b in zip(seconds["a"], seconds["b"], strict=True)]
    print(
        f"A median {statistics.median(seconds['a']):.2f} s, B median {statistics.median(seconds['b']):.2f} s;"
        f" B/A per round: median {statistics.median(ratios):.3f}; load average {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
