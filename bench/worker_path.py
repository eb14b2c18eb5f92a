"""The worker's own Python per job, without the database: what the engine adds to the floor.

    .venv/bin/python bench/worker_path.py [--against TREE] [--rounds 6] [--batches 2000]

bench/jobs.py's floor figure showed the engine's gap to a bare claim loop to be its own Python per
job (`--floor-burn-us`: the floor burning that much CPU per job drains as fast as the engine). This
measures that Python alone, in one process on uvloop: batches of 100 claimed jobs (made in memory,
as the claim statement's rows would be) go through the worker's own steps, as in a drain: held
(`Worker._claimed`), started on the runners, their no-op handler run, settled, their completions
taken for the next claim and accounted as written (`Completer.settled`). No statement is sent (the
worker's pool is made but not used), so the figure is the engine's Python and nothing else:
asyncpg's encoding and decoding, the same for the floor, are not in it.

`--against TREE` runs the same loop from another source tree (a checkout, or `git worktree add
/tmp/base REV`), in a subprocess with that tree's package first on the path, alternating with this
tree round by round, and prints this tree / that tree per round and the median.
"""

from __future__ import annotations

import argparse
import inspect
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BATCH = 100
SERVER = os.environ.get("TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


async def per_job_us(batches: int) -> float:
    """Microseconds of the worker's Python per job, over `batches` batches of BATCH jobs."""
    from asyncpg.pgproto import pgproto

    from paymanager.db.pool import create_pool
    from paymanager.jobs import JobContext, Registry, Worker
    from paymanager.jobs._store import Claimed, Job

    async def noop(ctx: JobContext) -> None:
        return None

    registry = Registry()
    registry.register("noop", noop, queue="bench")
    pool = await create_pool(SERVER, min_size=1, max_size=4)
    try:
        worker = Worker(pool, SERVER, registry, {"bench": 2 * BATCH})
        # The claim statement's lease tokens are asyncpg's UUIDs; made before the clock starts.
        tokens = [pgproto.UUID(uuid.uuid4().bytes) for _ in range(batches * BATCH)]
        rows = [
            [Job(b * BATCH + i, "bench", "noop", {}, 0, 1, None, None, None, tokens[b * BATCH + i], None,
                 False, 0.001) for i in range(BATCH)]
            for b in range(batches)
        ]  # fmt: skip
        executor, completer = worker._executor, worker._completer
        # A tree before 2026-12-06 starts one job per call (`--against` runs older trees).
        starts_all = len(inspect.signature(executor.start).parameters) == 1
        # A tree since 2026-12-06 also takes the limited queues a plain claim took along (none here).
        limited_args: tuple[list[str], list[int]] | tuple[()] = (
            ([], []) if "limited" in inspect.signature(worker._claimed).parameters else ()
        )
        started = time.perf_counter()
        for jobs in rows:
            worker._free["bench"] -= BATCH
            starts, _ = worker._claimed(Claimed(jobs, set()), ["bench"], [BATCH], {"bench": 0}, *limited_args)
            if starts_all:
                executor.start(starts)
            else:
                for start in starts:
                    executor.start(*start)
            await executor.wait_ended(10)
            batch = completer.take_completions()
            await completer.settled(batch, {completion.id for _, completion in batch})
        elapsed = time.perf_counter() - started
        assert not worker._held, "every job was settled"
        return elapsed / (batches * BATCH) * 1e6
    finally:
        await pool.close()


def run_tree(tree: str | None, batches: int) -> float:
    """One round from `tree`, in a process of its own (None: in this process)."""
    if tree is None:
        import uvloop

        return uvloop.run(per_job_us(batches))
    env = {**os.environ, "PYTHONPATH": f"{tree}/src"}
    out = subprocess.run(
        [sys.executable, __file__, "--child", "--batches", str(batches)],
        env=env, check=True, capture_output=True, text=True,
    )  # fmt: skip
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--against", help="another source tree to compare with")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--batches", type=int, default=2000, help="batches of 100 jobs per round")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(run_tree(None, args.batches))
        return
    print(f"# the worker's Python per job: {args.rounds} rounds of {args.batches * BATCH} jobs; "
          f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    ours: list[float] = []
    theirs: list[float] = []
    for round_no in range(1, args.rounds + 1):
        # Each tree in a fresh process, which goes first alternating.
        order = [str(ROOT), args.against] if round_no % 2 else [args.against, str(ROOT)]
        figures = {tree: run_tree(tree, args.batches) for tree in order if tree is not None}
        ours.append(figures[str(ROOT)])
        line = f"  round {round_no}: this tree {ours[-1]:.2f} us/job"
        if args.against:
            theirs.append(figures[args.against])
            line += f", {args.against} {theirs[-1]:.2f} us/job ({ours[-1] / theirs[-1]:.3f})"
        print(line, flush=True)
    summary = f"this tree: median {statistics.median(ours):.2f} us/job"
    if theirs:
        ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
        summary += (
            f"; {args.against}: {statistics.median(theirs):.2f}; this / that per round: median "
            f"{statistics.median(ratios):.3f}, {sum(r < 1 for r in ratios)} of {len(ratios)} below 1"
        )
    print(summary)


if __name__ == "__main__":
    main()
