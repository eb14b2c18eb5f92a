"""Mutation checks: break critical lines on purpose and make sure the tests named for each notice.

`python scripts/mutate.py [NAME ...]` (or `make mutate`) reads scripts/mutations.toml. For each
mutation it replaces the exact `original` snippet of `file` with `replacement`, runs the tests the
entry names (`pytest -x -q -p no:cacheprovider`), and restores the file, whatever happens (an error,
Ctrl-C). A mutation is killed when those tests fail, and survives when they pass. It prints a table
and the kill rate, and exits 1 when a mutation survived or when an entry is stale: its `original` is
not found exactly once in its file (the code moved on and the entry no longer breaks anything).

Why not a generic mutation tool: they mutate Python operators at random, not the SQL statements
where the engine's guarantees live (lease tokens, SKIP LOCKED, FOR UPDATE), and they take hours.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MUTATIONS = ROOT / "scripts" / "mutations.toml"
KILLED, SURVIVED, ERROR = "killed", "SURVIVED", "ERROR"


@dataclass(frozen=True)
class Mutation:
    name: str
    file: str
    original: str
    replacement: str
    tests: list[str]
    why: str


def load(path: Path = MUTATIONS) -> list[Mutation]:
    with path.open("rb") as handle:
        entries = tomllib.load(handle)["mutation"]
    return [Mutation(**entry) for entry in entries]


def problems(mutation: Mutation, root: Path = ROOT) -> list[str]:
    """Why `mutation` cannot be applied as written (empty when it can)."""
    found: list[str] = []
    path = root / mutation.file
    if not path.is_file():
        return [f"{mutation.name}: {mutation.file} does not exist"]
    count = path.read_text().count(mutation.original)
    if count != 1:
        found.append(f"{mutation.name}: its original is found {count} times in {mutation.file}, not once")
    if mutation.original == mutation.replacement:
        found.append(f"{mutation.name}: the replacement changes nothing")
    if not mutation.tests:
        found.append(f"{mutation.name}: no tests are named to catch it")
    for test in mutation.tests:
        test_path, _, function = test.partition("::")
        if not (root / test_path).exists():
            found.append(f"{mutation.name}: test path {test_path} does not exist")
        elif function and f"def {function.split('[')[0]}(" not in (root / test_path).read_text():
            found.append(f"{mutation.name}: {test_path} has no test {function}")
    if not mutation.why.strip():
        found.append(f"{mutation.name}: says no why")
    return found


def run_tests(mutation: Mutation, workers: int) -> str:
    """`killed` when the tests fail, `SURVIVED` when they pass, `ERROR` when pytest could not run them
    (a usage error, an internal error, no tests collected: a broken entry, not a killed mutation)."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--no-header"]
    # Under xdist, -x ends the run as interrupted (exit 2), which would read as ERROR: stop at the
    # first failure only without it.
    command += ["-n", str(workers)] if workers > 1 else ["-x"]
    # The command is ours and the test ids come from the repository's own mutations.toml.
    result = subprocess.run(  # noqa: S603
        [*command, *mutation.tests], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if result.returncode == 1:
        return KILLED
    if result.returncode == 0:
        return SURVIVED
    tail = "\n    ".join((result.stdout + result.stderr).splitlines()[-10:])
    print(f"pytest could not run the tests of {mutation.name} (exit {result.returncode}):\n    {tail}")
    return ERROR


def apply_and_test(mutation: Mutation, workers: int) -> str:
    path = ROOT / mutation.file
    original = path.read_text()
    try:
        path.write_text(original.replace(mutation.original, mutation.replacement, 1))
        return run_tests(mutation, workers)
    finally:
        path.write_text(original)  # on every way out, KeyboardInterrupt and SIGTERM included


def _interrupt(signum: int, frame: object) -> None:
    del frame
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("names", nargs="*", help="run only these mutations (default: all)")
    parser.add_argument("-n", "--workers", type=int, default=1, help="pytest-xdist workers per mutation")
    args = parser.parse_args()
    mutations = load()
    unknown = set(args.names) - {m.name for m in mutations}
    if unknown:
        print(f"unknown mutations: {sorted(unknown)}", file=sys.stderr)
        return 2
    stale = [problem for m in mutations for problem in problems(m)]
    if stale:
        print("stale or broken entries in scripts/mutations.toml:", *stale, sep="\n  ", file=sys.stderr)
        return 1
    signal.signal(signal.SIGTERM, _interrupt)
    chosen = [m for m in mutations if not args.names or m.name in args.names]
    rows: list[tuple[str, str, float]] = []
    started = time.monotonic()
    for mutation in chosen:
        began = time.monotonic()
        rows.append((mutation.name, apply_and_test(mutation, args.workers), time.monotonic() - began))
        print(f"{rows[-1][1]:>8}  {rows[-1][2]:6.1f} s  {mutation.name}", flush=True)
    width = max(len(name) for name, _, _ in rows)
    print(f"\n{'mutation':<{width}}  outcome   seconds")
    for name, outcome, seconds in rows:
        print(f"{name:<{width}}  {outcome:<8}  {seconds:7.1f}")
    killed_count = sum(1 for _, outcome, _ in rows if outcome == KILLED)
    print(
        f"\nkilled {killed_count}/{len(rows)} ({100 * killed_count / len(rows):.0f}%)"
        f" in {time.monotonic() - started:.0f} s"
    )
    survivors = [f"{name} ({outcome})" for name, outcome, _ in rows if outcome != KILLED]
    if survivors:
        print("not killed (add a test that fails with the mutation):", *survivors, sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted: the file under mutation was restored", file=sys.stderr)
        sys.exit(130)
