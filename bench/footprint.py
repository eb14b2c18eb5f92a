"""What a settled p2p intent costs on disk: bytes per intent, per table and per index.

Run: `.venv/bin/python bench/footprint.py [--intents 1000] [--concurrency 16]`
(PostgreSQL at BENCH_DATABASE_URL, default localhost:5432; a fresh database is created and dropped).
To measure another tree by the same method, put its sources first on the path:
`PYTHONPATH=/path/to/other/src .venv/bin/python bench/footprint.py`.

The benchmark builds the components of an `api,outbox-worker` process in this process, funds payers
(fixed costs, not counted), then sends N p2p intents through the HTTP app (ASGI, signed requests,
an Idempotency-Key on each create and confirm) and lets the outbox worker settle them all. Sizes are
taken after a plain `VACUUM` (no FULL: what a running system keeps, its freed space included) before
and after the N intents (a VACUUM also runs after every 200 intents, as autovacuum would), and the
difference divided by N is printed for every table (heap with its TOAST, free-space and visibility
maps) and every index; a partitioned table counts all its partitions, with their indexes (an index
made on each partition alone, with no parent index, shows as `per partition: <name>`), and the
script checks that the indexes it shows add up to every index of the schema. Last, the row updates
of each table and how many of them were HOT (no new index entries).
`raw` is the sum of `pg_column_size` of the rows' values (the data itself, without page, tuple
header or index overhead), the yardstick of what the row must keep.

`kept` tables grow with every intent for as long as their data lives (history, Idempotency-Keys for
their TTL); `bounded` ones churn and are pruned by time or count (signatures leave after their window,
finished jobs by retention) and are shown apart.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.intents import drain, drop_database, make_database, settled, setup  # noqa: E402
from tests.support.signed_client import SignedClient  # noqa: E402

from paymanager.api.app import create_app  # noqa: E402

VACUUM_EVERY = 200
# Churning tables, bounded by time or count; ledger_account's rows (one per account) change in place;
# ledger_pending keeps only the holds still open (migration 0205), intent_due only the intents waiting
# for a deadline (0306), so their sizes follow the intents in flight, not the intents settled.
BOUNDED = (
    "request_signature", "job", "job_queue", "job_periodic", "process", "ledger_account", "storage_upkeep",
    "ledger_pending", "intent_due",
)  # fmt: skip

# Every ordinary and partitioned table of the schema: its own size plus its partitions' (the members
# of pg_partition_tree, which is empty for a table that is not partitioned). Every index counts under
# the table at the root of its partition tree: a partitioned index with its partitions' indexes, and
# an index made on one partition alone (no parent index: ledger_transfer's per-partition id index)
# under the partitioned table, summed over the partitions that have one of that name but the suffix.
SIZES = """
SELECT c.relname AS name, 'table' AS kind, c.relname AS owner,
       (SELECT coalesce(sum(pg_table_size(t.relid)), 0)
          FROM (SELECT c.oid AS relid UNION SELECT relid FROM pg_partition_tree(c.oid)) AS t)::bigint AS bytes
  FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
 WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition
UNION ALL
SELECT name, 'index', owner, sum(bytes)::bigint
  FROM (SELECT CASE WHEN c.relispartition
                    THEN 'per partition: ' || substr(i.relname, length(c.relname) + 2)
                    ELSE i.relname END AS name,
               root.relname AS owner,
               (SELECT coalesce(sum(pg_relation_size(t.relid)), 0)
                  FROM (SELECT i.oid AS relid UNION SELECT relid FROM pg_partition_tree(i.oid)) AS t) AS bytes
          FROM pg_index AS x
          JOIN pg_class AS i ON i.oid = x.indexrelid
          JOIN pg_class AS c ON c.oid = x.indrelid
          JOIN pg_class AS root ON root.oid = coalesce(pg_partition_root(c.oid), c.oid)
          JOIN pg_namespace AS n ON n.oid = c.relnamespace
         WHERE n.nspname = 'public' AND NOT i.relispartition) AS found
 GROUP BY name, owner
"""
# Every index of the schema, whatever its table: what the rows above must add up to.
ALL_INDEXES = """
SELECT coalesce(sum(pg_relation_size(i.oid)), 0)::bigint
  FROM pg_class AS i JOIN pg_namespace AS n ON n.oid = i.relnamespace
 WHERE n.nspname = 'public' AND i.relkind = 'i'
"""


@dataclass(frozen=True)
class Snapshot:
    sizes: dict[tuple[str, str, str], int]
    raw: dict[str, int]


async def snapshot(conn: asyncpg.Connection) -> Snapshot:
    await conn.execute("VACUUM")
    sizes = {(r["kind"], r["owner"], r["name"]): r["bytes"] for r in await conn.fetch(SIZES)}
    counted = sum(size for (kind, _, _), size in sizes.items() if kind == "index")
    every = await conn.fetchval(ALL_INDEXES)
    assert counted == every, f"the indexes counted ({counted} B) are not all of the schema's ({every} B)"
    raw = {}
    for _, owner, _ in sizes:
        if owner not in raw:
            raw[owner] = int(
                await conn.fetchval(f'SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM "{owner}" AS t')
            )
    return Snapshot(sizes, raw)


async def traffic(
    client: SignedClient,
    pairs: list[tuple[str, str]],
    count: int,
    concurrency: int,
    vacuum: asyncpg.Connection,
) -> None:
    """`count` p2p intents created and confirmed over HTTP by `concurrency` tasks, with a VACUUM after
    every VACUUM_EVERY of them: autovacuum's part in a running system, so the space of dead versions
    (an updated intent, a key's outcome) is reused as it would be, whatever the machine's speed."""
    next_index = iter(range(count))
    vacuums: list[asyncio.Task[str]] = []

    async def one_task() -> None:
        for i in next_index:
            if i and i % VACUUM_EVERY == 0 and not any(not v.done() for v in vacuums):
                vacuums.append(asyncio.create_task(vacuum.execute("VACUUM")))
            payer, payee = pairs[i % len(pairs)]
            body = {
                "channel": "internal-p2p", "amount": 1000 + i % 977, "currency": "THB",
                "payer_account_id": payer, "payee_account_id": payee, "description": None,
            }  # fmt: skip
            created = await client.post("/intents", body)
            assert created.status_code == 201, created.text
            confirmed = await client.post(f"/intents/{created.json()['id']}/confirm")
            assert confirmed.status_code == 200, confirmed.text

    await asyncio.gather(*(one_task() for _ in range(concurrency)))
    await asyncio.gather(*vacuums)


def report(before: Snapshot, after: Snapshot, count: int) -> None:
    tables = sorted({owner for (_, owner, _) in after.sizes})
    totals = {"kept": 0.0, "bounded": 0.0}
    raw_totals = {"kept": 0.0, "bounded": 0.0}
    print(f"{'table / index':46} {'bytes/intent':>12} {'raw':>8}")
    for table in tables:
        grown = {
            key: (after.sizes[key] - before.sizes.get(key, 0)) / count
            for key in after.sizes
            if key[1] == table
        }
        whole = sum(grown.values())
        raw = (after.raw.get(table, 0) - before.raw.get(table, 0)) / count
        if whole == 0 and raw == 0:
            continue
        group = "bounded" if table in BOUNDED else "kept"
        totals[group] += whole
        raw_totals[group] += raw
        print(f"{table + ' (' + group + ')':46} {whole:12.0f} {raw:8.0f}")
        for (kind, _, name), value in sorted(grown.items(), key=lambda kv: kv[0][0] != "table"):
            label = "  heap" if kind == "table" else f"  {name}"
            print(f"{label:46} {value:12.0f}")
    for group in ("kept", "bounded"):
        print(f"{'TOTAL ' + group:46} {totals[group]:12.0f} {raw_totals[group]:8.0f}")


# Row updates, and how many were HOT (no new index entry, the old version's space reused on its page),
# per table over its partitions; the setup's updates (funding) are included.
UPDATES = """
SELECT coalesce(pg_partition_root(relid), relid)::regclass::text AS owner,
       sum(n_tup_upd)::bigint AS updates, sum(n_tup_hot_upd)::bigint AS hot
  FROM pg_stat_user_tables
 GROUP BY 1
HAVING sum(n_tup_upd) > 0
 ORDER BY 1
"""


async def report_updates(url: str) -> None:
    """Taken once every connection of the run is closed: a backend reports its counts as it exits."""
    conn = await asyncpg.connect(url)
    try:
        print(f"{'updates (HOT) per table':46} {'updates':>12} {'HOT':>8}")
        for row in await conn.fetch(UPDATES):
            print(f"{row['owner']:46} {row['updates']:12} {row['hot']:8}")
    finally:
        await conn.close()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--intents", type=int, default=1000, help="Settled p2p intents to measure.")
    parser.add_argument("--concurrency", type=int, default=16, help="Concurrent HTTP clients.")
    args = parser.parse_args()
    url = await make_database()
    try:
        s = await setup(url)
        components = s.components
        pool = s.payments.pool
        conn = await asyncpg.connect(url)
        vacuum = await asyncpg.connect(url)
        try:
            base = await settled(pool)
            # Both sizes are taken with no process's service running, so no open transaction keeps a
            # dead version from the VACUUM.
            before = await snapshot(conn)
            for service in components.services:
                await service.start()
            try:
                app = create_app(components)
                started = time.perf_counter()
                async with httpx.AsyncClient(
                    transport=httpx.ASGITransport(app=app), base_url="http://b"
                ) as http:
                    client = SignedClient(http, s.shop.id, s.shop_secret)
                    pairs = [(str(a), str(b)) for a, b in s.pairs]
                    await traffic(client, pairs, args.intents, args.concurrency, vacuum)
                await drain(pool, base + args.intents, settled)
                seconds = time.perf_counter() - started
            finally:
                for service in reversed(components.services):
                    await service.stop(5)
            after = await snapshot(conn)
        finally:
            await conn.close()
            await vacuum.close()
        print(f"{args.intents} p2p intents created, confirmed and settled in {seconds:.1f} s; after VACUUM:")
        report(before, after, args.intents)
        await components.close()
        await pool.close()
        await report_updates(url)
    finally:
        await drop_database(url)


if __name__ == "__main__":
    asyncio.run(main())
