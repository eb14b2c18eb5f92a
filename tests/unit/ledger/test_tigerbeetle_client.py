"""The adapter on the real client while no server answers: requests it stops waiting for.

The client cannot withdraw a request once submitted, and its `close()` asserts that none is left
registered; a request whose coroutine was cancelled (a timeout, a caller giving up) stays
registered, so the adapter must never cancel one. A client aimed at a closed port is enough to
show it: it keeps reconnecting and never answers.
"""

from __future__ import annotations

import asyncio
import socket

import pytest
import tigerbeetle as tb

from paymanager.ledger import LedgerUnavailableError
from paymanager.ledger.tigerbeetle import TigerBeetleLedger


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _unanswered_ledger() -> TigerBeetleLedger:
    client = tb.ClientAsync(cluster_id=0, replica_addresses=str(_closed_port()))
    return TigerBeetleLedger(client, ping_timeout_s=0.2)


async def test_pings_that_time_out_leave_one_request_behind_and_the_client_closable() -> None:
    ledger = _unanswered_ledger()
    for _ in range(3):
        with pytest.raises(LedgerUnavailableError, match=r"did not answer within 0\.2 s"):
            await ledger.ping()
    # A probe every few seconds through an outage must not queue a lookup per probe.
    assert len(ledger._requests) == 1
    await asyncio.wait_for(ledger.close(), 10)
    assert not ledger._requests


async def test_a_request_its_caller_stopped_waiting_for_leaves_the_client_closable() -> None:
    ledger = _unanswered_ledger()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(ledger.lookup_accounts([1]), 0.2)
    await asyncio.wait_for(ledger.close(), 10)


async def test_a_request_on_a_closed_client_is_the_ports_unavailable_error() -> None:
    ledger = _unanswered_ledger()
    await asyncio.wait_for(ledger.close(), 10)
    with pytest.raises(LedgerUnavailableError, match="ClientClosedError"):
        await ledger.lookup_accounts([1])
