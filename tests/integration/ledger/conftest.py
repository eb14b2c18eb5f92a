"""The conformance suite's backends: the PostgreSQL ledger always, TigerBeetle where it answers."""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg
import pytest

from paymanager.ledger import Ledger, PostgresLedger

TB_ADDRESS = os.environ.get("TB_ADDRESS", "3000")


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


def tigerbeetle_unreachable_reason() -> str | None:
    try:
        import tigerbeetle  # noqa: F401
    except ImportError:
        return "the tigerbeetle client is not installed (pip install 'paymanager[tigerbeetle]')"
    from paymanager.ledger.tigerbeetle import replica_endpoints

    host, port = replica_endpoints(TB_ADDRESS)[0]
    try:
        with socket.create_connection((host, port), timeout=1):
            return None
    except OSError as exc:
        return f"no TigerBeetle server answers at TB_ADDRESS={TB_ADDRESS} ({host}:{port}): {exc}"


@pytest.fixture(params=["postgres", "tigerbeetle"])
async def backend(request: pytest.FixtureRequest, pool: asyncpg.Pool) -> AsyncIterator[Backend]:
    if request.param == "postgres":
        clock = FakeClock()
        yield Backend("postgres", PostgresLedger(pool, clock=clock), clock, 700)
        return
    reason = tigerbeetle_unreachable_reason()
    if reason is not None:
        print(f"skipping the TigerBeetle backend: {reason}")
        pytest.skip(reason)
    from paymanager.ledger.tigerbeetle import TigerBeetleLedger

    ledger = await TigerBeetleLedger.connect(TB_ADDRESS, cluster_id=int(os.environ.get("TB_CLUSTER_ID", "0")))
    try:
        yield Backend("tigerbeetle", ledger, None, secrets.randbelow(2**31) + 1000)
    finally:
        await ledger.close()


@pytest.fixture
def clock_backend(backend: Backend) -> Backend:
    """A backend whose clock the test controls (timeouts); skipped where time is the server's."""
    if backend.clock is None:
        pytest.skip(f"{backend.name} keeps its own clock; timeout expiry is tested on postgres")
    return backend
