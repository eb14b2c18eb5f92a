"""Ledger throughput: transfers/s of PostgresLedger against a naive baseline, in the same run.

    .venv/bin/python bench/ledger.py [--transfers 10000] [--rounds 3] [--keep]
    .venv/bin/python bench/ledger.py --backend tigerbeetle [--transfers 10000] [--rounds 3]

`--backend tigerbeetle` measures, in the same run and rounds interleaved, one client sending
batches of 1, 100 and 1,000 random transfers among 10,000 accounts to: the TigerBeetle adapter
(`TigerBeetleLedger`), the official Python client driven directly (`tigerbeetle.ClientAsync`, the
adapter's floor), and the PostgreSQL ledger; and prints the ratios the goals of issue 20 are stated
in. It starts a TigerBeetle replica of its own (`--development --experimental --limit-request=1MiB`,
full 8,189-event requests, about 1.8 GiB; the binary as the tests find it) unless `TB_ADDRESS` names
a running cluster.

Creates a fresh database on BENCH_DATABASE_URL's server (default: the local PostgreSQL at
127.0.0.1:5432), migrates it, creates 10,000 accounts and measures:
  - batches of 1, 100 and 1,000 transfers among the 10,000 accounts (random) and all touching one
    hot account (hot), one client;
  - batches of 100 from 4 concurrent clients (not coalesced), random and hot, where concurrent
    batches on the hot account wait for each other's lock;
  - single transfers (batches of 1) from 16 concurrent clients (16 tasks on one ledger with a pool of
    18 connections), with the ledger's coalescing of concurrent calls and without it;
  - the naive baseline: one transaction per transfer with an UPDATE per account and an INSERT.
Rounds interleave every scenario with the baseline, so that load from elsewhere on the machine hits
all of them alike; the figures are medians. Prints transfers/s and the ratios the goals of issue 4
are stated in, and for the one-client scenarios the CPU time per transfer of this process and of the
server's backends (read from /proc, so only when the server runs on this machine): on a machine
shared with other work, CPU time per transfer is steadier than transfers/s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg

from paymanager.db import migrations
from paymanager.db.pool import create_pool
from paymanager.db.sql import parse_queries
from paymanager.ledger import Account, PostgresLedger, TigerBeetleLedger, Transfer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.tigerbeetle_server import TigerBeetleCluster, find_binary  # noqa: E402

SERVER = os.environ.get("BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
ACCOUNTS = 10_000
HOT = ACCOUNTS + 1
CLIENTS = 16
NAIVE = parse_queries((Path(__file__).parent / "ledger_naive.sql").read_text(), "bench/ledger_naive.sql")


def with_database(url: str, name: str) -> str:
    base, _, _ = url.rpartition("/")
    return f"{base}/{name}"


class Ids:
    def __init__(self) -> None:
        self.next = 1 << 64

    def take(self) -> int:
        self.next += 1
        return self.next


class CpuMeter:
    """CPU seconds used by this process and by the server backends of the benchmark database."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self.ticks_per_s = os.sysconf("SC_CLK_TCK")

    async def read(self) -> tuple[float, float | None]:
        pids = [r[0] for r in await self.pool.fetch(NAIVE["bench_backend_pids"])]
        return time.process_time(), self.server_seconds(pids)

    def server_seconds(self, pids: list[int]) -> float | None:
        server = 0.0
        for pid in pids:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            except OSError:
                return None  # the server runs elsewhere
            server += (int(fields[11]) + int(fields[12])) / self.ticks_per_s  # utime + stime
        return server


def make_transfers(ids: Ids, count: int, hot: bool, rng: random.Random) -> list[Transfer]:
    made = []
    for _ in range(count):
        debit = rng.randint(1, ACCOUNTS)
        credit = HOT if hot else rng.randint(1, ACCOUNTS)
        while credit == debit:
            credit = rng.randint(1, ACCOUNTS)
        made.append(Transfer(ids.take(), debit, credit, rng.randint(1, 1000), ledger=1, code=1))
    return made


async def run_batches(ledger: PostgresLedger, transfers: list[Transfer], size: int) -> float:
    started = time.perf_counter()
    for i in range(0, len(transfers), size):
        results = await ledger.create_transfers(transfers[i : i + size])
        assert all(r.ok for r in results), {r.result for r in results}
    return len(transfers) / (time.perf_counter() - started)


async def run_concurrent(ledger: PostgresLedger, transfers: list[Transfer], clients: int) -> float:
    async def client(part: list[Transfer]) -> None:
        for transfer in part:
            (result,) = await ledger.create_transfers([transfer])
            assert result.ok, result

    started = time.perf_counter()
    await asyncio.gather(*(client(transfers[i::clients]) for i in range(clients)))
    return len(transfers) / (time.perf_counter() - started)


async def run_parallel_batches(
    ledger: PostgresLedger, transfers: list[Transfer], size: int, clients: int
) -> float:
    """`clients` tasks each sending batches of `size` (the ledger must not coalesce them)."""
    batches = [transfers[i : i + size] for i in range(0, len(transfers), size)]

    async def client(mine: list[list[Transfer]]) -> None:
        for batch in mine:
            results = await ledger.create_transfers(batch)
            assert all(r.ok for r in results), {r.result for r in results}

    started = time.perf_counter()
    await asyncio.gather(*(client(batches[i::clients]) for i in range(clients)))
    return len(transfers) / (time.perf_counter() - started)


async def run_naive(pool: asyncpg.Pool, transfers: list[Transfer]) -> float:
    started = time.perf_counter()
    async with pool.acquire() as conn:
        for t in transfers:
            async with conn.transaction():
                await conn.execute(NAIVE["naive_debit"], uuid.UUID(int=t.debit_account_id), t.amount)
                await conn.execute(NAIVE["naive_credit"], uuid.UUID(int=t.credit_account_id), t.amount)
                debit, credit = uuid.UUID(int=t.debit_account_id), uuid.UUID(int=t.credit_account_id)
                await conn.execute(
                    NAIVE["naive_transfer_insert"],
                    uuid.UUID(int=t.id),
                    debit,
                    credit,
                    t.amount,
                    time.time_ns(),
                )
    return len(transfers) / (time.perf_counter() - started)


SCENARIOS = [(hot, size) for hot in (False, True) for size in (1, 100, 1000)]


def scenario_name(hot: bool, size: int) -> str:
    return f"{'hot' if hot else 'random'} batch {size}"


async def one_round(
    ledger: PostgresLedger,
    plain: PostgresLedger,
    pool: asyncpg.Pool,
    ids: Ids,
    total: int,
    rng: random.Random,
    cpu: dict[str, list[tuple[float, float | None]]],
) -> dict[str, float]:
    """Every scenario once, the baseline in between, so that load from elsewhere hits all alike.

    Appends to `cpu` the CPU seconds per transfer (client, server) of each one-client scenario."""
    meter = CpuMeter(pool)
    figures: dict[str, float] = {}
    figures["naive"] = await run_naive(pool, make_transfers(ids, max(200, total // 20), False, rng))
    for hot, size in SCENARIOS:
        count = max(200, total // 20) if size == 1 else total
        transfers = make_transfers(ids, count, hot, rng)
        client_before, server_before = await meter.read()
        figures[scenario_name(hot, size)] = await run_batches(ledger, transfers, size)
        client_after, server_after = await meter.read()
        server = None
        if server_before is not None and server_after is not None:
            server = (server_after - server_before) / count
        cpu.setdefault(scenario_name(hot, size), []).append(((client_after - client_before) / count, server))
    for hot in (False, True):
        name = f"4 clients x {scenario_name(hot, 100)}"
        figures[name] = await run_parallel_batches(plain, make_transfers(ids, total, hot, rng), 100, 4)
    batch_one = make_transfers(ids, max(800, total // 5), False, rng)
    figures["16 clients x 1"] = await run_concurrent(ledger, batch_one, CLIENTS)
    batch_one = make_transfers(ids, max(800, total // 5), False, rng)
    figures["16 clients x 1, no coalescing"] = await run_concurrent(plain, batch_one, CLIENTS)
    return figures


async def bench(total: int, rounds: int, url: str) -> None:
    pool = await create_pool(url, min_size=2, max_size=CLIENTS + 2)
    ledger = PostgresLedger(pool)
    plain = PostgresLedger(pool, coalesce=False)
    accounts = [Account(i, ledger=1, code=1) for i in range(1, ACCOUNTS + 2)]
    for i in range(0, len(accounts), 5000):
        await ledger.create_accounts(accounts[i : i + 5000])
    rng = random.Random(42)
    ids = Ids()
    # A warm-up so that both sides run with prepared statements and warm caches.
    await run_batches(ledger, make_transfers(ids, 2000, False, rng), 100)
    await run_naive(pool, make_transfers(ids, 300, False, rng))
    results: dict[str, list[float]] = {}
    cpu: dict[str, list[tuple[float, float | None]]] = {}
    for _ in range(rounds):
        for name, value in (await one_round(ledger, plain, pool, ids, total, rng, cpu)).items():
            results.setdefault(name, []).append(value)
    verification = await ledger.verify()
    await pool.close()
    median = {name: statistics.median(values) for name, values in results.items()}
    print(f"median of {rounds} rounds; transfers/s (min .. max)")
    for name, values in results.items():
        print(f"  {name:<32} {median[name]:>9,.0f}   ({min(values):,.0f} .. {max(values):,.0f})")
    print()
    naive = median["naive"]
    print(f"  random batch 1000 / naive        {median['random batch 1000'] / naive:>6.1f}x  (goal >= 10x)")
    print(f"  random batch 100 / naive         {median['random batch 100'] / naive:>6.1f}x")
    print(f"  random batch 1 / naive           {median['random batch 1'] / naive:>6.1f}x")
    print(f"  16 clients x 1 / naive           {median['16 clients x 1'] / naive:>6.1f}x")
    for size in (1, 100, 1000):
        ratio = median[scenario_name(True, size)] / median[scenario_name(False, size)]
        print(f"  hot / random, batch {size:<5}        {ratio:>6.2f}x  (goal >= 0.5x)")
    ratio = median["4 clients x hot batch 100"] / median["4 clients x random batch 100"]
    print(f"  hot / random, 4 clients x 100    {ratio:>6.2f}x  (concurrent batches wait on the hot account)")
    print_cpu(cpu)
    print(f"ledger verify after the run: {'ok' if verification.ok else verification.violations}")


def print_cpu(cpu: dict[str, list[tuple[float, float | None]]]) -> None:
    print()
    print("CPU per transfer, one client (median of rounds): client + server backends")
    for name, values in cpu.items():
        client_us = statistics.median(c for c, _ in values) * 1e6
        servers = [s for _, s in values if s is not None]
        if not servers:
            print(f"  {name:<32} client {client_us:7.1f} us   server: not on this machine")
            continue
        server_us = statistics.median(servers) * 1e6
        total_us = client_us + server_us
        print(
            f"  {name:<32} client {client_us:7.1f} us + server {server_us:7.1f} us"
            f" = {total_us:7.1f} us  ({1e6 / total_us:>9,.0f} transfers per CPU-second)"
        )


async def compare_backends(total: int, rounds: int, url: str, tb_address: str) -> None:
    """TigerBeetle (adapter and raw client) beside the PostgreSQL ledger, rounds interleaved."""
    import tigerbeetle as tb

    from paymanager.ledger.tigerbeetle import _to_tb_transfer

    pool = await create_pool(url, min_size=2, max_size=4)
    pg = PostgresLedger(pool)
    tbl = await TigerBeetleLedger.connect(tb_address, attempts=3, backoff_ms=500)
    raw = tb.ClientAsync(cluster_id=0, replica_addresses=tb_address)
    accounts = [Account(i, ledger=1, code=1) for i in range(1, ACCOUNTS + 2)]
    for i in range(0, len(accounts), 5000):
        await pg.create_accounts(accounts[i : i + 5000])
        await tbl.create_accounts(accounts[i : i + 5000])
    rng = random.Random(42)
    ids = Ids()

    async def run_raw(transfers: list[Transfer], size: int) -> float:
        # The client's own objects are built outside the timing, as a caller of the client would
        # hold them: this is the floor the adapter's translation adds to.
        batches = [
            [_to_tb_transfer(tb, t) for t in transfers[i : i + size]] for i in range(0, len(transfers), size)
        ]
        started = time.perf_counter()
        for batch in batches:
            results = await raw.create_transfers(batch)
            assert all(r.status == tb.CreateTransferStatus.CREATED for r in results), results[:3]
        return len(transfers) / (time.perf_counter() - started)

    for ledger in (pg, tbl):  # warm-up
        await run_batches(ledger, make_transfers(ids, 2000, False, rng), 100)  # type: ignore[arg-type]
    results: dict[str, list[float]] = {}
    variants = (
        ("postgres", lambda t, s: run_batches(pg, t, s)),
        ("tigerbeetle", lambda t, s: run_batches(tbl, t, s)),  # type: ignore[arg-type]
        ("tigerbeetle client", run_raw),
    )
    for round_number in range(rounds):
        for size in (1, 100, 1000):
            count = max(200, total // 20) if size == 1 else total
            # Every other round in the reverse order: a variant that always ran right after the same
            # other one (the replica compacting what the previous one wrote) would carry its cost.
            for name, run in variants if round_number % 2 == 0 else tuple(reversed(variants)):
                value = await run(make_transfers(ids, count, False, rng), size)
                results.setdefault(f"{name} batch {size}", []).append(value)
    await raw.close()
    await tbl.close()
    await pool.close()
    median = {name: statistics.median(values) for name, values in results.items()}
    print(f"one client, random transfers; median of {rounds} rounds; transfers/s (min .. max)")
    for name, values in results.items():
        print(f"  {name:<32} {median[name]:>9,.0f}   ({min(values):,.0f} .. {max(values):,.0f})")
    print()
    for size in (1, 100, 1000):
        tb_pg = median[f"tigerbeetle batch {size}"] / median[f"postgres batch {size}"]
        tb_raw = median[f"tigerbeetle batch {size}"] / median[f"tigerbeetle client batch {size}"]
        goal = "  (goal >= 1.5x)" if size == 1000 else ""
        print(f"  batch {size:<5} tigerbeetle / postgres        {tb_pg:>6.2f}x{goal}")
        print(f"  batch {size:<5} adapter / official client     {tb_raw:>6.2f}x  (goal >= 0.9x)")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--transfers", type=int, default=10_000, help="transfers per batched scenario and round"
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds; figures are medians")
    parser.add_argument("--keep", action="store_true", help="keep the benchmark database")
    parser.add_argument(
        "--backend", choices=("postgres", "tigerbeetle"), default="postgres",
        help="postgres: the PostgreSQL ledger against the naive baseline; tigerbeetle: TigerBeetle "
        "(adapter and official client) beside the PostgreSQL ledger",
    )  # fmt: skip
    args = parser.parse_args()
    name = f"pm_bench_ledger_{os.getpid()}"
    admin = await asyncpg.connect(SERVER)
    await admin.execute(f'CREATE DATABASE "{name}"')
    url = with_database(SERVER, name)
    try:
        conn = await asyncpg.connect(url)
        await migrations.migrate(conn)
        await conn.close()
        if args.backend == "tigerbeetle":
            await with_tigerbeetle(
                lambda address: compare_backends(args.transfers, args.rounds, url, address)
            )
        else:
            await bench(args.transfers, args.rounds, url)
    finally:
        if not args.keep:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def with_tigerbeetle(work: Callable[[str], Awaitable[None]]) -> None:
    """`work(TB_ADDRESS)` on the cluster TB_ADDRESS names, else on a replica started for the run."""
    if os.environ.get("TB_ADDRESS"):
        await work(os.environ["TB_ADDRESS"])
        return
    binary = find_binary()
    if binary is None:
        raise SystemExit("no tigerbeetle binary (TIGERBEETLE_BIN, PATH or ../shared/bin/tigerbeetle)")
    cluster = TigerBeetleCluster(binary, full_batches=True)
    try:
        await work(cluster.address)
    finally:
        cluster.close()


if __name__ == "__main__":
    asyncio.run(main())
