"""The conformance suite's backends: the PostgreSQL ledger and a real TigerBeetle replica (conftest)."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg
import pytest

from paymanager.ledger import Ledger, PostgresLedger, TigerBeetleLedger


class FakeClock:
    """Nanoseconds that move only when a test moves them."""

    def __init__(self, start_ns: int = 1_700_000_000_000_000_000) -> None:
        self.now_ns = start_ns

    def __call__(self) -> int:
        return self.now_ns

    def advance(self, seconds: float) -> None:
        self.now_ns += int(seconds * 1_000_000_000)


@dataclass
class Backend:
    name: str
    ledger: Ledger
    clock: FakeClock | None  # None: the backend keeps its own time (TigerBeetle)
    ledger_number: int  # a ledger number of this test alone, so tests can share a TigerBeetle cluster

    def new_id(self) -> int:
        return secrets.randbits(127) + 1


async def _tigerbeetle(address: str) -> AsyncIterator[Backend]:
    ledger = await TigerBeetleLedger.connect(address)
    try:
        yield Backend("tigerbeetle", ledger, None, secrets.randbelow(2**31) + 1000)
    finally:
        await ledger.close()


@pytest.fixture(params=["postgres", "tigerbeetle"])
async def backend(request: pytest.FixtureRequest, pool: asyncpg.Pool) -> AsyncIterator[Backend]:
    if request.param == "postgres":
        clock = FakeClock()
        yield Backend("postgres", PostgresLedger(pool, clock=clock), clock, 700)
        return
    async for made in _tigerbeetle(request.getfixturevalue("tigerbeetle_address")):
        yield made


@pytest.fixture
async def tigerbeetle(tigerbeetle_address: str) -> AsyncIterator[Backend]:
    """The TigerBeetle backend alone: for its rules the PostgreSQL ledger does not share (the list
    of differences in ledger/__init__.py)."""
    async for made in _tigerbeetle(tigerbeetle_address):
        yield made
