"""What one no-op job costs PostgreSQL: paymanager's engine and PGQueuer, in ONE run on one server.

    .venv/bin/python bench/job_cost.py [--jobs 20000] [--rounds 2] [--pgq-batch 1000]
                                       [--floor] [--profile SECONDS] [--top 6]

With two worker processes PostgreSQL's CPU is the limit, so what each job makes the server do is
the lever; these counts do not depend on the machine's load (the throughput figures of
bench/jobs.py do). For each engine, in its own fresh database, per job and per phase:

- `enqueue`: one bulk enqueue of N jobs (paymanager's `enqueue_many`, PGQueuer's `enqueue`);
- `process`: one worker process (bench/jobs.py's worker) draining them;
- `prune` (paymanager only): deleting the N completed jobs, as its retention does later
  (PGQueuer deletes a job at its completion and writes a log row, both counted in `process`).

The figures of a phase are differences of the server's own counters taken around it:
- statements, execution and planning time, WAL bytes: pg_stat_statements of that database
  (the bench's own queries, which watch for the empty queue and read the counters, left out);
- rows inserted, updated (HOT share) and deleted: pg_stat_user_tables;
- index entries written and WAL by relation: the WAL itself (pg_walinspect) between the phase's
  start and end (a temporary replication slot keeps it until read), the records whose blocks are
  in that database; a B-tree INSERT record is one
  index entry. Commit records are counted with the transactions of those records. Full-page images
  depend on when checkpoints fall, so WAL is shown with and without them;
- backend CPU: utime + stime of the database's backends (/proc), the one load-dependent figure.

`--floor` also drains the N jobs with a bare loop of the worker's own claim-and-complete statement
(`job_claim_batch`, the batch and pipeline of the worker's defaults in bench/jobs.py) with no
engine around it, and prints the engine's throughput as a ratio to it, per round. `--profile S`
records the engine's worker process with py-spy for S seconds of a larger drain and prints where
its time goes (by function, own and total).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import jobs as jb  # noqa: E402

from paymanager.db.pool import init_connection  # noqa: E402
from paymanager.jobs._queries import Q  # noqa: E402

# What the bench itself runs in the databases it measures; left out of the statement counts.
OWN_QUERIES = ("pg_stat_statements", "pg_stat_user_tables", "pg_current_wal_lsn", "pg_stat_activity",
               "pg_relation_filenode", "pg_get_wal_records_info", "replication_slot",
               "SELECT EXISTS (SELECT $1 FROM job", "SELECT EXISTS (SELECT $1 FROM pgqueuer)", "TRUNCATE",
               "CREATE EXTENSION", "ALTER TABLE", "txid_current")  # fmt: skip
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Counters:
    statements: dict[int, tuple[str, float, float, float, float, float]]  # calls, exec, plan, wal, rows
    tables: dict[str, tuple[int, int, int, int]]  # ins, upd, hot, del
    lsn: str
    cpu: dict[int, float] = field(default_factory=dict)


@dataclass
class Cost:
    """One phase's cost, totals (divide by the jobs for per job)."""

    calls: float = 0
    exec_ms: float = 0
    plan_ms: float = 0
    stmt_wal: float = 0
    ins: int = 0
    upd: int = 0
    hot: int = 0
    dele: int = 0
    index_entries: int = 0
    wal: int = 0
    wal_no_fpi: int = 0
    cpu_s: float = 0
    by_index: dict[str, int] = field(default_factory=dict)
    by_record: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    by_statement: list[tuple[str, float, float]] = field(default_factory=list)


def own(query: str) -> bool:
    return any(marker in query for marker in OWN_QUERIES)


async def read_counters(conn: asyncpg.Connection) -> Counters:
    stmts = await conn.fetch(
        "SELECT queryid, query, calls, total_exec_time, total_plan_time, wal_bytes, rows"
        "  FROM pg_stat_statements"
        " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
    )
    tables = await conn.fetch(
        "SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del FROM pg_stat_user_tables"
    )
    lsn = await conn.fetchval("SELECT pg_current_wal_lsn()::text")
    return Counters(
        {int(r["queryid"]): (r["query"], float(r["calls"]), float(r["total_exec_time"]),
                             float(r["total_plan_time"]), float(r["wal_bytes"]), float(r["rows"]))
         for r in stmts if not own(r["query"])},
        {r["relname"]: (r["n_tup_ins"], r["n_tup_upd"], r["n_tup_hot_upd"], r["n_tup_del"]) for r in tables},
        str(lsn),
    )  # fmt: skip


async def backend_cpu(conn: asyncpg.Connection) -> dict[int, float]:
    """CPU seconds so far of every other backend of this database."""
    pids = await conn.fetch(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    cpu: dict[int, float] = {}
    for row in pids:
        with contextlib.suppress(OSError):
            with open(f"/proc/{row['pid']}/stat") as stat:  # noqa: ASYNC230 - procfs does not block
                fields = stat.read().rsplit(")", 1)[1].split()
            cpu[row["pid"]] = (int(fields[11]) + int(fields[12])) / TICKS
    return cpu


async def wal_records(
    conn: asyncpg.Connection, start: str, end: str
) -> tuple[dict[str, tuple[int, int, int]], int, int]:
    """(entries, bytes, bytes without FPI) by relation and record kind of this database's records
    between `start` and `end`, and the bytes (with and without FPI) of their transactions' commits."""
    rows = await conn.fetch(
        """
        WITH r AS MATERIALIZED (
            SELECT xid, resource_manager AS rm, record_type AS t, record_length AS len, fpi_length AS fpi,
                   substring(block_ref FROM 'rel [0-9]+/' || $3::text || '/([0-9]+)') AS node
              FROM pg_get_wal_records_info($1::text::pg_lsn, $2::text::pg_lsn)
        ), mine AS (
            SELECT * FROM r WHERE node IS NOT NULL
        ), commits AS (
            SELECT * FROM r WHERE rm = 'Transaction' AND xid IN (SELECT xid FROM mine WHERE xid <> '0')
        )
        SELECT coalesce(c.relname, 'relfilenode ' || m.node) AS rel, m.rm || '/' || m.t AS kind,
               count(*) AS n, sum(m.len) AS bytes, sum(m.len - m.fpi) AS no_fpi
          FROM mine AS m LEFT JOIN pg_class AS c ON pg_relation_filenode(c.oid)::text = m.node
         GROUP BY 1, 2
        UNION ALL
        SELECT '(commit)', 'Transaction', count(*), coalesce(sum(len), 0), coalesce(sum(len - fpi), 0)
          FROM commits
        """,
        start,
        end,
        str(await conn.fetchval("SELECT oid FROM pg_database WHERE datname = current_database()")),
    )
    by: dict[str, tuple[int, int, int]] = {}
    total = no_fpi = 0
    for r in rows:
        by[f"{r['rel']} {r['kind']}"] = (int(r["n"]), int(r["bytes"]), int(r["no_fpi"]))
        total += int(r["bytes"])
        no_fpi += int(r["no_fpi"])
    return by, total, no_fpi


async def measure_phase(dsn: str, run: Any) -> tuple[Cost, Any]:
    """Run the coroutine function `run` and return what its phase cost the database (and its result)."""
    conn = await asyncpg.connect(dsn)
    try:
        # A temporary slot keeps the phase's WAL from being recycled by a checkpoint until it is read;
        # it goes with this session, whatever happens to the bench.
        slot = f"pm_job_cost_{os.getpid()}"
        await conn.execute("SELECT pg_create_physical_replication_slot($1, true, true)", slot)
        before = await read_counters(conn)
        before.cpu = await backend_cpu(conn)
        outcome = await run(conn)
        cpu_end: dict[int, float] = outcome.pop("cpu", None) if isinstance(outcome, dict) else None
        after = await read_counters(conn)
        # A transaction that writes and commits synchronously flushes the WAL up to its commit, and
        # so every record of the phase (the claims commit without waiting for their flush).
        await conn.execute("BEGIN; SELECT txid_current(); COMMIT")
        for _ in range(1_000):
            if await conn.fetchval("SELECT pg_current_wal_flush_lsn() >= $1::text::pg_lsn", after.lsn):
                break
            await asyncio.sleep(0.01)
        cost = Cost()
        for qid, (query, calls, exec_ms, plan_ms, wal, _rows) in after.statements.items():
            prev = before.statements.get(qid, (query, 0.0, 0.0, 0.0, 0.0, 0.0))
            d_calls, d_exec = calls - prev[1], exec_ms - prev[2]
            if d_calls <= 0:
                continue
            cost.calls += d_calls
            cost.exec_ms += d_exec
            cost.plan_ms += plan_ms - prev[3]
            cost.stmt_wal += wal - prev[4]
            cost.by_statement.append((" ".join(query.split())[:90], d_calls, d_exec))
        for name, (ins, upd, hot, dele) in after.tables.items():
            b = before.tables.get(name, (0, 0, 0, 0))
            cost.ins += ins - b[0]
            cost.upd += upd - b[1]
            cost.hot += hot - b[2]
            cost.dele += dele - b[3]
        by, cost.wal, cost.wal_no_fpi = await wal_records(conn, before.lsn, after.lsn)
        cost.by_record = by
        await conn.execute("SELECT pg_drop_replication_slot($1)", slot)
        for key, (n, _bytes, _no_fpi) in by.items():
            if "Btree/INSERT" in key or "Btree/NEWROOT" in key:
                rel = key.split(" ", 1)[0]
                cost.by_index[rel] = cost.by_index.get(rel, 0) + n
                if "INSERT_LEAF" in key or "INSERT_POST" in key:
                    cost.index_entries += n
        if cpu_end is not None:
            cost.cpu_s = sum(v - before.cpu.get(pid, 0.0) for pid, v in cpu_end.items())
        return cost, outcome
    finally:
        await conn.close()


async def stats_settled(conn: asyncpg.Connection) -> None:
    """Until no other backend of the database is left: a backend's table counters reach the shared
    statistics when it exits, and the workers' have all exited then."""
    for _ in range(2_000):
        if not await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ):
            return
        await asyncio.sleep(0.01)


def drain_phase(engine: str, dsn: str) -> Any:
    """One worker process drains the queue; returns the phase's coroutine function."""

    async def run(conn: asyncpg.Connection) -> dict[str, Any]:
        proc = await asyncio.to_thread(jb.spawn, engine, dsn, "drain")
        busy = jb.OURS_BUSY if engine == "ours" else jb.PGQ_BUSY
        jb.go([proc])
        started = time.perf_counter()
        while await conn.fetchval(busy):  # noqa: ASYNC110 - polls the database; no event exists
            await asyncio.sleep(jb.DRAIN_POLL_S)
        seconds = time.perf_counter() - started
        cpu = await backend_cpu(conn)
        jb.go([proc])
        await asyncio.to_thread(jb.results, [proc])
        await stats_settled(conn)
        return {"seconds": seconds, "cpu": cpu}

    return run


def prune_phase(dsn: str) -> Any:
    """Delete every completed job the way the maintenance's pruner does (bounded batches), on a
    connection of its own: its table counters reach the statistics when it closes."""

    async def run(conn: asyncpg.Connection) -> dict[str, Any]:
        from paymanager.jobs import Retention, admin

        pruner = await asyncpg.connect(dsn)
        try:
            retention = Retention(completed_age_ms=0, completed_count=None)
            deleted = await admin.prune(pruner, retention, batch_max=5_000)
        finally:
            await pruner.close()
        await stats_settled(conn)
        return {"deleted": deleted}

    return run


async def prepare(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        if await conn.fetchval(
            "SELECT NOT ('pg_stat_statements' = ANY (regexp_split_to_array(current_setting("
            "'shared_preload_libraries'), '\\s*,\\s*')))"
        ):
            raise SystemExit(
                "pg_stat_statements is not loaded: as a superuser, ALTER SYSTEM SET shared_preload_libraries"
                " = 'pg_stat_statements', then restart PostgreSQL (pg_ctlcluster 15 main restart)"
            )
    finally:
        await conn.close()


def enqueue_phase(engine: str, dsn: str, n: int) -> Any:
    async def run(conn: asyncpg.Connection) -> dict[str, Any]:
        bulk = jb.ours_bulk if engine == "ours" else jb.pgq_bulk
        return {"seconds": await bulk(dsn, n)}

    return run


async def set_fillfactor(dsn: str, fillfactor: int) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f"ALTER TABLE job SET (fillfactor = {int(fillfactor)})")
    finally:
        await conn.close()


def one_round(engine: str, dsn: str, n: int, fillfactor: int | None = None) -> dict[str, Cost]:
    asyncio.run(jb.reset(engine, dsn))
    if engine == "ours" and fillfactor is not None:
        asyncio.run(set_fillfactor(dsn, fillfactor))
    costs: dict[str, Cost] = {}
    costs["enqueue"], _ = asyncio.run(measure_phase(dsn, enqueue_phase(engine, dsn, n)))
    costs["process"], outcome = asyncio.run(measure_phase(dsn, drain_phase(engine, dsn)))
    costs["process"].by_statement.append(("(seconds)", 0, outcome["seconds"] * 1000))
    if engine == "ours":
        costs["prune"], _ = asyncio.run(measure_phase(dsn, prune_phase(dsn)))
    return costs


# --- the floor: the worker's statement in a bare loop ---------------------------------------------------


async def floor_drain(dsn: str) -> float:
    """Seconds for a bare loop of job_claim_batch (PIPELINE loops at once, each claiming up to
    the engine's claim size, bench/jobs.py's claim_size(), and completing its previous batch in the
    same statement) to drain the queue."""
    batch = jb.claim_size()
    conns = [await asyncpg.connect(dsn) for _ in range(jb.PIPELINE)]
    for conn in conns:
        await init_connection(conn)
        await conn.fetch(Q["job_session_generic_plans"])
    claim = Q["job_claim_batch"]

    async def loop(conn: asyncpg.Connection) -> None:
        ids: list[int] = []
        tokens: list[uuid.UUID] = []
        while True:
            rows = await conn.fetch(
                claim, [jb.QUEUE], [batch], "floor", 30_000, ids, tokens, [None] * len(ids),
                jb.NOTIFY_COMPLETED, jb.QUICK_CLAIM and not ids,
            )  # fmt: skip
            claimed = [r for r in rows if r["claimed"]]
            if not claimed and not ids:
                return
            ids = [r["id"] for r in claimed]
            tokens = [r["lease_token"] for r in claimed]

    try:
        started = time.perf_counter()
        await asyncio.gather(*(loop(c) for c in conns))
        return time.perf_counter() - started
    finally:
        for conn in conns:
            await conn.close()


def floor_round(dsn: str, n: int) -> tuple[float, float]:
    """(engine jobs/s, floor jobs/s), the engine's worker process and the bare loop back to back."""
    asyncio.run(jb.reset("ours", dsn))
    asyncio.run(jb.ours_bulk(dsn, n))
    engine_s, _ = jb.process_run("ours", dsn, 1)
    asyncio.run(jb.reset("ours", dsn))
    asyncio.run(jb.ours_bulk(dsn, n))
    floor_s = asyncio.run(floor_drain(dsn))
    return n / engine_s, n / floor_s


# --- py-spy -------------------------------------------------------------------------------------------------


def profile(dsn: str, n: int, seconds: float, top: int) -> None:
    """Record the engine's worker process with py-spy while it drains `n` jobs; print by function."""
    asyncio.run(jb.reset("ours", dsn))
    asyncio.run(jb.ours_bulk(dsn, n))
    proc = jb.spawn("ours", dsn, "drain")
    out = Path(tempfile.mkdtemp(prefix="pm-pyspy-")) / "profile.txt"
    spy = subprocess.Popen(
        [str(Path(sys.executable).with_name("py-spy")), "record", "--pid", str(proc.pid), "--format", "raw",
         "--duration", str(int(seconds)), "--rate", "250", "--nonblocking", "--output", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    time.sleep(0.5)  # py-spy attaches before the drain starts
    jb.go([proc])
    spy.wait(timeout=seconds + 60)

    async def empty() -> None:
        conn = await asyncpg.connect(dsn)
        try:
            while await conn.fetchval(jb.OURS_BUSY):  # noqa: ASYNC110 - polls the database
                await asyncio.sleep(0.05)
        finally:
            await conn.close()

    asyncio.run(empty())
    jb.go([proc])
    jb.results([proc])
    if not out.exists():
        print(f"# py-spy recorded nothing: {spy.stderr.read() if spy.stderr else ''}")
        return
    summarize(out, top)


def frame_name(frame: str) -> str:
    # "function (path/to/module.py:123)" -> "module.py:function"
    match = re.match(r"(.*) \((.*?):\d+\)$", frame.strip())
    if not match:
        return frame.strip()
    func, path = match.groups()
    return f"{Path(path).name}:{func}"


def summarize(raw: Path, top: int) -> None:
    own_samples: collections.Counter[str] = collections.Counter()
    total_samples: collections.Counter[str] = collections.Counter()
    area: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [frame_name(f) for f in stack.split(";") if f.strip()]
        if not frames:
            continue
        samples += count
        own_samples[frames[-1]] += count
        for name in set(frames):
            total_samples[name] += count
        area[classify(stack)] += count
    if not samples:
        print("# py-spy: no samples")
        return
    print(f"# py-spy: {samples} samples of the worker process (its idle waits included)")
    print("  where the time goes, by area (innermost frame's package):")
    for name, count in area.most_common():
        print(f"    {count / samples:6.1%}  {name}")
    print(f"  top {top} functions by own time:")
    for name, count in own_samples.most_common(top):
        print(f"    {count / samples:6.1%}  {name}")
    print(f"  top {top} paymanager functions by total time:")
    ours = [(n, c) for n, c in total_samples.most_common() if "paymanager" not in n and _is_ours(n)]
    for name, count in ours[:top]:
        print(f"    {count / samples:6.1%}  {name}")


PAYMANAGER_MODULES = ("worker.py", "_completer.py", "_executor.py", "_leases.py", "_pinned.py", "_store.py",
                      "context.py", "registry.py", "events.py", "_listener.py", "_limits.py")  # fmt: skip


def _is_ours(name: str) -> bool:
    return name.split(":", 1)[0] in PAYMANAGER_MODULES


def classify(stack: str) -> str:
    innermost = stack.rsplit(";", 1)[-1]
    for marker, label in (
        ("asyncpg", "asyncpg (protocol, codecs)"),
        ("paymanager/jobs", "paymanager.jobs (engine)"),
        ("uvloop", "uvloop (event loop, I/O)"),
        ("asyncio", "asyncio (tasks, futures)"),
        ("orjson", "orjson"),
        ("structlog", "logging"),
    ):
        if marker in innermost:
            return label
    return "other: " + frame_name(innermost).split(":", 1)[0]


# --- report -----------------------------------------------------------------------------------------------


def per_job_table(n: int, rounds: dict[str, list[dict[str, Cost]]], top: int) -> None:
    def med(engine: str, phase: str, key: str) -> float:
        values = [getattr(r[phase], key) for r in rounds[engine] if phase in r]
        return statistics.median(values) / n if values else float("nan")

    rows = [
        ("statements", "calls", "{:.3f}"),
        ("execution time (us)", "exec_ms", "{:.1f}"),
        ("planning time (us)", "plan_ms", "{:.2f}"),
        ("WAL bytes (statements)", "stmt_wal", "{:.0f}"),
        ("WAL bytes (records, commits)", "wal", "{:.0f}"),
        ("  of it without full pages", "wal_no_fpi", "{:.0f}"),
        ("rows inserted", "ins", "{:.3f}"),
        ("rows updated", "upd", "{:.3f}"),
        ("  of them HOT", "hot", "{:.3f}"),
        ("rows deleted", "dele", "{:.3f}"),
        ("index entries written", "index_entries", "{:.3f}"),
        ("backend CPU (us, load-dependent)", "cpu_s", "{:.1f}"),
    ]
    scale = {"exec_ms": 1000.0, "plan_ms": 1000.0, "cpu_s": 1_000_000.0}
    phases = [
        ("ours", "enqueue"),
        ("ours", "process"),
        ("ours", "prune"),
        ("pgq", "enqueue"),
        ("pgq", "process"),
    ]
    header = f"{'per job (median of rounds)':<34}" + "".join(f"{e + ' ' + p:>15}" for e, p in phases)
    header += f"{'ours all':>11}{'pgq all':>11}"
    print(header)
    for label, key, fmt in rows:
        cells = []
        totals = {"ours": 0.0, "pgq": 0.0}
        for engine, phase in phases:
            value = med(engine, phase, key) * scale.get(key, 1.0)
            if value == value:  # not NaN
                totals[engine] += value
            cells.append(f"{fmt.format(value):>15}")
        print(
            f"{label:<34}"
            + "".join(cells)
            + f"{fmt.format(totals['ours']):>11}{fmt.format(totals['pgq']):>11}"
        )
    for engine in ("ours", "pgq"):
        last = rounds[engine][-1]
        upd = sum(c.upd for c in last.values())
        hot = sum(c.hot for c in last.values())
        print(
            f"HOT share of {engine}'s updates (last round): {hot / upd:.1%}"
            if upd
            else f"{engine}: no updates"
        )
        for phase, cost in last.items():
            print(f"  {engine} {phase}:")
            if cost.by_index:
                shown = ", ".join(f"{k} {v / n:.2f}" for k, v in sorted(cost.by_index.items()))
                print(f"    B-tree records per job by index: {shown}")
            records = sorted(cost.by_record.items(), key=lambda kv: -kv[1][1])[:top]
            for kind, (count, size, no_fpi) in records:
                print(
                    f"    WAL {count / n:6.2f} records {size / n:6.0f} B ({no_fpi / n:4.0f} w/o FPI) {kind}"
                )
            stmts = sorted((s for s in cost.by_statement if s[0] != "(seconds)"), key=lambda s: -s[2])[:top]
            for text, calls, exec_ms in stmts:
                print(f"    {calls / n:7.3f} calls {exec_ms * 1000 / n:7.1f} us  {text}")


def bench(args: argparse.Namespace) -> None:
    from paymanager.logging import configure_logging

    configure_logging("warning", "json")
    os.environ.setdefault("BENCH_LOOP", "uvloop")
    os.environ["BENCH_PGQ_BATCH"] = str(args.pgq_batch)
    jb.PGQ_BATCH = args.pgq_batch
    n = args.jobs
    created: list[str] = []
    try:
        dsns = {engine: asyncio.run(jb.create_database(engine)) for engine in ("ours", "pgq")}
        created.extend(dsns.values())
        for dsn in dsns.values():
            asyncio.run(prepare(dsn))
        load = os.getloadavg()
        print(
            f"# per-job cost: {n} no-op jobs, {args.rounds} rounds, 1 worker process, paymanager concurrency "
            f"{jb.CONCURRENCY} (pipeline {jb.PIPELINE}), PGQueuer batch {args.pgq_batch}; "
            f"load average {load[0]:.1f} at the start"
        )
        rounds: dict[str, list[dict[str, Cost]]] = {"ours": [], "pgq": []}
        for r in range(args.rounds):
            for engine in ("ours", "pgq") if r % 2 == 0 else ("pgq", "ours"):
                rounds[engine].append(one_round(engine, dsns[engine], n, args.fillfactor))
        if args.rounds:
            per_job_table(n, rounds, args.top)
        if args.floor:
            pairs = [floor_round(dsns["ours"], n) for _ in range(args.floor_rounds)]
            shown = ", ".join(f"{e:.0f}/{f:.0f} ({e / f:.2f}x)" for e, f in pairs)
            ratio = statistics.median(e / f for e, f in pairs)
            print(
                f"engine vs the bare loop of job_claim_batch (jobs/s, engine/floor): {shown}; "
                f"median {ratio:.2f}x"
            )
        if args.profile:
            profile(dsns["ours"], args.profile_jobs, args.profile, args.top)
        print(f"# load average at the end {os.getloadavg()[0]:.1f}")
    finally:
        for dsn in created:
            with contextlib.suppress(Exception):
                asyncio.run(jb.drop_database(dsn))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=2, help="rounds of the cost table (0: none)")
    parser.add_argument("--pgq-batch", type=int, default=1000, help="PGQueuer's batch size (its best here)")
    parser.add_argument("--floor", action="store_true", help="also the bare loop of the claim statement")
    parser.add_argument("--floor-rounds", type=int, default=3, help="engine/floor pairs run")
    parser.add_argument("--profile", type=float, default=0, help="py-spy the worker for this many seconds")
    parser.add_argument("--profile-jobs", type=int, default=200_000, help="jobs queued for the profile")
    parser.add_argument("--top", type=int, default=6)
    parser.add_argument("--fillfactor", type=int, help="set the job table's fillfactor first (an A/B knob)")
    bench(parser.parse_args())


if __name__ == "__main__":
    main()
