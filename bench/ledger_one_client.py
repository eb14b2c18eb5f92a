"""One client, random accounts, batches of 100 and 1,000: the two figures of issue 4's unmet goals.

    .venv/bin/python bench/ledger_one_client.py [--transfers 10000] [--rounds 3]

The same scenarios as bench/ledger.py (its `make_transfers` and `run_batches`, one client sending
sequential batches, durable commits), without the others, so that an A/B of two versions of the
ledger can alternate many short runs in one sitting: put the other version's `src` first on
`PYTHONPATH` to run it. The server's CPU time counts the client backends only: bench/ledger.py
counts every process of the benchmark database, autovacuum workers included, which moves the
server figure by +-15% from run to run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics

import asyncpg

from ledger import ACCOUNTS, SERVER, CpuMeter, Ids, make_transfers, run_batches, with_database
from paymanager.db import migrations
from paymanager.db.pool import create_pool
from paymanager.ledger import Account, PostgresLedger

SIZES = (100, 1000)
CLIENT_BACKENDS = (
    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend'"
)


class ClientBackendMeter(CpuMeter):
    async def read(self) -> tuple[float, float | None]:
        client, _ = await super().read()
        pids = [r[0] for r in await self.pool.fetch(CLIENT_BACKENDS)]
        return client, self.server_seconds(pids)


async def bench(url: str, total: int, rounds: int) -> None:
    pool = await create_pool(url, min_size=2, max_size=4)
    ledger = PostgresLedger(pool)
    accounts = [Account(i, ledger=1, code=1) for i in range(1, ACCOUNTS + 2)]
    for i in range(0, len(accounts), 5000):
        await ledger.create_accounts(accounts[i : i + 5000])
    rng = random.Random(42)
    ids = Ids()
    meter = ClientBackendMeter(pool)
    await run_batches(ledger, make_transfers(ids, 2000, False, rng), 100)  # warm-up
    figures: dict[int, list[tuple[float, float, float | None]]] = {}
    for _ in range(rounds):
        for size in SIZES:
            transfers = make_transfers(ids, total, False, rng)
            client_before, server_before = await meter.read()
            rate = await run_batches(ledger, transfers, size)
            client_after, server_after = await meter.read()
            server = None
            if server_before is not None and server_after is not None:
                server = (server_after - server_before) / total
            figures.setdefault(size, []).append((rate, (client_after - client_before) / total, server))
    verification = await ledger.verify()
    await pool.close()
    print(f"one client, random accounts; median of {rounds} rounds of {total:,} transfers")
    for size, values in figures.items():
        rates = ", ".join(f"{v[0]:,.0f}" for v in values)
        client_us = statistics.median(v[1] for v in values) * 1e6
        servers = [v[2] for v in values if v[2] is not None]
        server_us = f"{statistics.median(servers) * 1e6:5.1f} us" if servers else "not on this machine"
        print(
            f"  batches of {size:>5}: {statistics.median(v[0] for v in values):9,.0f}/s ({rates})"
            f"  CPU per transfer: client {client_us:5.1f} us + server backends {server_us}"
        )
    print(f"ledger verify after the run: {'ok' if verification.ok else verification.violations}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transfers", type=int, default=10_000, help="transfers per batch size and round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; figures are medians")
    args = parser.parse_args()
    name = f"pm_bench_ledger_one_{os.getpid()}"
    admin = await asyncpg.connect(SERVER)
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        url = with_database(SERVER, name)
        conn = await asyncpg.connect(url)
        await migrations.migrate(conn)
        await conn.close()
        await bench(url, args.transfers, args.rounds)
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


if __name__ == "__main__":
    asyncio.run(main())
