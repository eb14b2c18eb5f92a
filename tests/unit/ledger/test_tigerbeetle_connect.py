"""Connecting to TigerBeetle: address parsing and the retry schedule of the source (no server needed)."""

from __future__ import annotations

import socket

import pytest

from paymanager.ledger import LedgerUnavailableError
from paymanager.ledger.tigerbeetle import TigerBeetleLedger, replica_endpoints


def test_replica_addresses_follow_tigerbeetles_syntax() -> None:
    assert replica_endpoints("3000") == [("127.0.0.1", 3000)]
    assert replica_endpoints("10.0.0.5, 10.0.0.6:4000") == [("10.0.0.5", 3001), ("10.0.0.6", 4000)]
    with pytest.raises(ValueError):
        replica_endpoints(" , ")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_connect_tries_five_times_waiting_2000_ms_times_the_try() -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    with pytest.raises(LedgerUnavailableError, match="after 5 tries"):
        await TigerBeetleLedger.connect(str(_closed_port()), sleep=sleep)
    assert waits == [2.0, 4.0, 6.0, 8.0]
