"""Load-independent costs of one benchmark run: CPU seconds per process group and statements.

On a shared machine the wall-clock rate depends on everyone else's load; what a change of ours
moves is the work each item costs. `RunCosts` measures over one run:

- CPU seconds (user + system) of each named group of processes (the workers, a sandbox, the bench
  itself) and of the PostgreSQL backends serving each group (found by the client ports of the
  group's sockets in `pg_stat_activity`), from psutil;
- the bench database's statements (calls of `pg_stat_statements`, the extension created in the
  bench database; top-level statements, so one call is one round trip), their WAL bytes, and its
  transactions (`pg_stat_database`);

and `report(items)` prints each per item. Background processes of the server (WAL writer,
checkpointer, autovacuum) serve every database of the machine and are not counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import psutil

_STATEMENTS = """
SELECT userid, queryid, calls, wal_bytes::bigint AS wal_bytes, query
  FROM pg_stat_statements
 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
"""
_TRANSACTIONS = """
SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()
"""
_BACKENDS = """
SELECT pid, client_port FROM pg_stat_activity
 WHERE datname = current_database() AND client_port IS NOT NULL AND backend_type = 'client backend'
"""
# pg_stat_database is flushed by each backend at most once a second while it is busy.
STATS_FLUSH_S = 1.2


async def enable_statements(conn: asyncpg.Connection) -> None:
    """pg_stat_statements in the bench database (the server preloads the library)."""
    await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")


def _cpu(pid: int) -> float:
    try:
        times = psutil.Process(pid).cpu_times()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return 0.0
    return float(times.user + times.system)


def _ports(pids: list[int]) -> set[int]:
    ports: set[int] = set()
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            for conn in psutil.Process(pid).net_connections(kind="tcp"):
                if conn.laddr:
                    ports.add(conn.laddr.port)
    return ports


@dataclass
class _Snapshot:
    cpu: dict[int, float]  # by pid: groups' processes and the database's backends
    backends: dict[int, str]  # backend pid -> the group it serves
    statements: dict[tuple[int, int], tuple[int, int, str]]  # (userid, queryid) -> calls, wal, text
    transactions: int


@dataclass
class Costs:
    seconds_cpu: dict[str, float]  # by group, then "postgres:<group>" for its backends
    statements: int
    transactions: int
    wal_bytes: int
    top: list[tuple[int, str]] = field(default_factory=list)  # (calls, statement), most called first

    def report(self, items: int, what: str = "item") -> str:
        per = [f"{name} {1000 * s / items:.2f}" for name, s in self.seconds_cpu.items()]
        total = 1000 * sum(self.seconds_cpu.values()) / items
        return (
            f"  CPU ms per {what}: {', '.join(per)}; total {total:.2f}\n"
            f"  per {what}: {self.statements / items:.1f} statements, {self.transactions / items:.1f}"
            f" transactions, {self.wal_bytes / items:,.0f} WAL bytes"
        )

    def report_statements(self, items: int, limit: int = 15) -> str:
        lines = [
            f"    {calls / items:6.2f}  {' '.join(text.split())[:110]}" for calls, text in self.top[:limit]
        ]
        return "  statements per item, most called first:\n" + "\n".join(lines)


class RunCosts:
    """Costs of the process groups `groups` (name -> pids, children not included: the bench's
    children are the other groups) over one run; backends serving no group are `postgres:other`."""

    def __init__(self, conn: asyncpg.Connection, groups: dict[str, list[int]]) -> None:
        self._conn = conn
        self._groups = groups
        self._before: _Snapshot | None = None

    async def _snapshot(self) -> _Snapshot:
        by_port: dict[int, str] = {}
        for name, pids in self._groups.items():
            for port in _ports(pids):
                by_port[port] = name
        backends = {
            row["pid"]: by_port.get(row["client_port"], "other") for row in await self._conn.fetch(_BACKENDS)
        }
        cpu = {pid: _cpu(pid) for pids in self._groups.values() for pid in pids}
        cpu.update({pid: _cpu(pid) for pid in backends})
        statements = {
            (row["userid"], row["queryid"]): (row["calls"], row["wal_bytes"] or 0, row["query"])
            for row in await self._conn.fetch(_STATEMENTS)
        }
        transactions = int(await self._conn.fetchval(_TRANSACTIONS))
        return _Snapshot(cpu, backends, statements, transactions)

    async def start(self) -> None:
        self._before = await self._snapshot()

    async def stop(self) -> Costs:
        assert self._before is not None, "start() first"
        await asyncio.sleep(STATS_FLUSH_S)
        after = await self._snapshot()
        before = self._before
        seconds: dict[str, float] = {}
        for name, pids in self._groups.items():
            seconds[name] = sum(after.cpu.get(p, 0.0) - before.cpu.get(p, 0.0) for p in pids)
        for pid, group in after.backends.items():
            key = f"postgres:{group}"
            # A backend started during the run is counted from zero.
            seconds[key] = seconds.get(key, 0.0) + after.cpu[pid] - before.cpu.get(pid, 0.0)
        calls = 0
        wal = 0
        top: list[tuple[int, str]] = []
        for key, (n, wal_bytes, text) in after.statements.items():
            was = before.statements.get(key, (0, 0, text))
            if n - was[0] > 0:
                calls += n - was[0]
                wal += wal_bytes - was[1]
                top.append((n - was[0], text))
        top.sort(reverse=True)
        # The snapshots' own statements are the bench's, not the workers'; they are few.
        return Costs(seconds, calls, after.transactions - before.transactions, wal, top)


class Profile:
    """py-spy sampling one process into collapsed stacks (`--format raw`) while the run lasts;
    `python bench/costs.py top FILE` sums them by function."""

    def __init__(self, pid: int, path: str | None, rate_hz: int = 100) -> None:
        self._args = ["py-spy", "record", "--pid", str(pid), "--rate", str(rate_hz), "--format", "raw",
                      "--nonblocking", "--output", path or ""]  # fmt: skip
        self._path = path
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Profile:
        if self._path:
            py_spy = Path(sys.executable).with_name("py-spy")
            self._args[0] = str(py_spy) if py_spy.exists() else "py-spy"
            self._proc = subprocess.Popen(self._args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            self._proc.send_signal(signal.SIGINT)
            self._proc.wait(timeout=60)


def top(path: str, limit: int = 40) -> None:
    """The functions with the most samples in a collapsed-stack file: self and inclusive shares."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in Path(path).read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        n = int(count)
        total += n
        frames = stack.split(";")
        own[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n
    print(f"{total} samples; self:")
    for frame, n in own.most_common(limit):
        print(f"  {100 * n / total:5.1f}%  {frame}")
    print("inclusive:")
    for frame, n in inclusive.most_common(limit):
        print(f"  {100 * n / total:5.1f}%  {frame}")


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "top":
        top(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 40)
    else:
        print("usage: python bench/costs.py top FILE [LIMIT]")
