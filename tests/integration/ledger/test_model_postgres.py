"""The PostgreSQL ledger agrees with the reference model on random programs, batch after batch."""

from __future__ import annotations

import secrets
from typing import Any

from hypothesis import HealthCheck, given, settings

from paymanager.db.pool import create_pool
from paymanager.ledger import PostgresLedger
from tests.support.databases import run_sync
from tests.support.examples import examples
from tests.support.ledger_model import SECOND, Model
from tests.support.ledger_programs import base_accounts, funding, map_ids, steps

START_NS = 1_700_000_000_000_000_000


class Clock:
    def __init__(self) -> None:
        # Examples start minutes apart, so their transfers do not contend for the same timestamps,
        # within a year of START_NS: ledger_transfer has partitions for the past (migration 0203)
        # and a few months ahead only.
        self.now_ns = START_NS + secrets.randbelow(500_000) * 60 * SECOND

    def __call__(self) -> int:
        return self.now_ns


async def run(database_url: str, program: list[Any]) -> None:
    # Each example gets its own id space, so examples share the database without meeting.
    offset = secrets.randbits(120) << 6
    clock = Clock()
    pool = await create_pool(database_url, min_size=1, max_size=2)
    try:
        ledger = PostgresLedger(pool, clock=clock)
        model = Model()
        ids = [*sorted(a.id for a in base_accounts()), 8, 9]

        async def check_balances() -> None:
            found = {a.id - offset: a for a in await ledger.lookup_accounts([i + offset for i in ids])}
            got = {
                i: (a.debits_pending, a.debits_posted, a.credits_pending, a.credits_posted)
                for i, a in found.items()
            }
            assert got == model.balances()

        async def transfers(batch: list[Any]) -> None:
            got = await ledger.create_transfers([map_ids(offset, t) for t in batch])
            assert [r.result for r in got] == model.create_transfers(batch, clock.now_ns), batch

        async def accounts(batch: list[Any]) -> None:
            got = await ledger.create_accounts([map_ids(offset, a) for a in batch])
            assert [r.result for r in got] == model.create_accounts(batch, clock.now_ns), batch

        await accounts(base_accounts())
        await transfers(funding())
        for step in program:
            if step[0] == "transfers":
                await transfers(step[1])
            elif step[0] == "accounts":
                await accounts(step[1])
            elif step[0] == "advance":
                clock.now_ns += step[1] * SECOND + 1_000_000
            else:
                model.expire(clock.now_ns)
                # Expiry is global; other examples' transfers are long resolved or unexpired here.
                await ledger.expire_pending(clock.now_ns)
            await check_balances()
        verification = await ledger.verify()
        assert verification.ok, verification.violations
    finally:
        await pool.close()


# The database is shared by the examples on purpose: each works in its own id space and time range.
@settings(
    max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(program=steps())
def test_postgres_ledger_agrees_with_the_model(database_url: str, program: list[Any]) -> None:
    run_sync(run(database_url, program))
