"""paymanager's worker from two trees (or two settings), alternating round by round.

    .venv/bin/python bench/jobs_ab.py A B [--jobs 50000] [--rounds 8] [--workers 1] [--beside-limited]

A and B are each a source tree (a checkout or `git worktree add /tmp/a REV`) with optional
`BENCH_*` settings after a colon: `/work/main`, `/tmp/a:BENCH_PIPELINE=3`,
`/work/main:BENCH_NOTIFY_COMPLETED=0`, `/work/main:BENCH_BESIDE_LIMITED=1` (that tree's runs
serve the limited queues beside, as `--beside-limited` below: against the same tree alone, what they
cost the plain queue). Each tree runs on a database of its own, migrated by that tree's code, so a
tree whose schema differs (an index dropped) is measured on its own schema. Each round runs both,
which goes first alternating (the second run of a pair
was faster in some sittings), each from a freshly bulk-enqueued queue of
`--jobs` no-op jobs, timed as bench/jobs.py times its processing figure (its worker and drain
watch, with the tree's package first on PYTHONPATH). The figure is B/A per round and its median:
on a shared 2-core VM one engine's own figure moves by 20-50 % from run to run, which only a ratio
of adjacent runs, over many rounds, reads through.

`--beside-limited`: every run serves a rate-limited and a globally limited queue beside the plain one
(bench/jobs.py's), and the plain queue alone is timed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import jobs as jobs_bench  # bench/jobs.py, beside this file

# The settings a tree's spec may set; the others are left as the environment has them.
SETTINGS = ("BENCH_PIPELINE", "BENCH_CONCURRENCY", "BENCH_QUICK_CLAIM", "BENCH_DELETE_COMPLETED",
            "BENCH_NOTIFY_COMPLETED", "BENCH_LOOP", "BENCH_BESIDE_LIMITED", "BENCH_SIDE_JOB_MS")  # fmt: skip


@dataclass(frozen=True)
class Tree:
    path: str
    settings: dict[str, str]

    @classmethod
    def parse(cls, spec: str) -> Tree:
        path, _, rest = spec.partition(":")
        settings = dict(item.split("=", 1) for item in rest.split(",") if item)
        unknown = set(settings) - set(SETTINGS)
        if unknown:
            raise SystemExit(f"{spec}: unknown settings {sorted(unknown)}; choose from {', '.join(SETTINGS)}")
        if not os.path.isdir(os.path.join(path, "src", "paymanager")):
            raise SystemExit(f"{spec}: {path} holds no src/paymanager")
        return cls(os.path.abspath(path), settings)

    def apply(self) -> None:
        """Make the next spawned worker run this tree's code with its settings."""
        for name in SETTINGS:
            os.environ.pop(name, None)
        os.environ.update(self.settings)
        os.environ["PYTHONPATH"] = os.path.join(self.path, "src")


# Run in a child process on the tree's own code: its migrations, not this checkout's.
_MIGRATE = """
import asyncio, sys, asyncpg
from paymanager.db import migrations

async def main() -> None:
    conn = await asyncpg.connect(sys.argv[1])
    try:
        await migrations.migrate(conn)
    finally:
        await conn.close()

asyncio.run(main())
"""


def tree_database(tree: Tree) -> str:
    """A new database with the schema of `tree`'s own migrations."""
    dsn = asyncio.run(jobs_bench.create_database("ours", install=False))
    env = {**os.environ, "PYTHONPATH": os.path.join(tree.path, "src")}
    subprocess.run([sys.executable, "-c", _MIGRATE, dsn], env=env, check=True)
    return dsn


@contextlib.contextmanager
def tree_databases(trees: dict[str, Tree]) -> Iterator[dict[str, str]]:
    """A database per tree (by key), each with that tree's own schema, all dropped at the end."""
    dsns: dict[str, str] = {}
    try:
        for key, tree in trees.items():
            dsns[key] = tree_database(tree)
        yield dsns
    finally:
        for dsn in dsns.values():
            asyncio.run(jobs_bench.drop_database(dsn))


def ab_parser(doc: str | None) -> argparse.ArgumentParser:
    """An A/B script's arguments: the two trees, A and B, as `Tree.parse` reads them."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a")
    parser.add_argument("b")
    return parser


def round_order(r: int) -> tuple[str, str]:
    """Which tree runs first in round `r`: alternating, as the second run of a pair may be faster."""
    return ("a", "b") if r % 2 == 0 else ("b", "a")


def one_run(tree: Tree, dsn: str, n: int, workers: int, beside: bool) -> float:
    tree.apply()
    asyncio.run(jobs_bench.reset("ours", dsn))
    asyncio.run(jobs_bench.ours_bulk(dsn, n))
    beside = beside or tree.settings.get("BENCH_BESIDE_LIMITED") == "1"
    seconds, _ = jobs_bench.process_run("ours", dsn, workers, beside=beside)
    return n / seconds


def main() -> None:
    parser = ab_parser(__doc__)
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--beside-limited", action="store_true")
    args = parser.parse_args()
    trees = {"a": Tree.parse(args.a), "b": Tree.parse(args.b)}
    print(
        f"# {args.jobs} jobs, {args.workers} worker process(es), {args.rounds} rounds, "
        f"{'all runs beside limited queues' if args.beside_limited else 'limited queues as a tree says'}; "
        f"A = {args.a}, B = {args.b}; load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    rates: dict[str, list[float]] = {"a": [], "b": []}
    with tree_databases(trees) as dsns:
        for r in range(args.rounds):
            for key in round_order(r):
                rates[key].append(
                    one_run(trees[key], dsns[key], args.jobs, args.workers, args.beside_limited)
                )
            x, y = rates["a"][-1], rates["b"][-1]
            print(f"  round {r + 1}: B/A {y:.0f}/{x:.0f} jobs/s ({y / x:.2f}x)", flush=True)
    ratios = [y / x for x, y in zip(rates["a"], rates["b"], strict=True)]
    print(
        f"A median {statistics.median(rates['a']):.0f} jobs/s, B median {statistics.median(rates['b']):.0f}; "
        f"B/A per round: median {statistics.median(ratios):.3f}, "
        f"{sum(x > 1 for x in ratios)} of {len(ratios)} above 1; load average {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
