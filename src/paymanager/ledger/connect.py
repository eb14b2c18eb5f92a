"""Open the configured ledger: what the runtime's start-up step "connect the ledger" calls.

The ledger does not read configuration itself (it is a library); the runtime passes the values of
`LEDGER_BACKEND`, `TB_ADDRESS`, `TB_CLUSTER_ID` and the connect attempts/backoff settings.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Literal

import asyncpg

from paymanager.db.pool import Pool
from paymanager.ledger.port import Ledger
from paymanager.ledger.postgres import PostgresLedger
from paymanager.ledger.types import LedgerUnavailableError
from paymanager.logging import get_logger

log = get_logger("paymanager.ledger")


async def open_ledger(
    backend: Literal["postgres", "tigerbeetle"],
    *,
    pool: Pool,
    tb_address: str = "3000",
    tb_cluster_id: int = 0,
    attempts: int = 5,
    backoff_ms: int = 2000,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> Ledger:
    """The ledger of `backend`, reachable, after at most `attempts` tries `backoff_ms` x try apart.

    Raises `LedgerUnavailableError` when every try failed.
    """
    if backend == "tigerbeetle":
        from paymanager.ledger.tigerbeetle import TigerBeetleLedger

        return await TigerBeetleLedger.connect(
            tb_address, cluster_id=tb_cluster_id, attempts=attempts, backoff_ms=backoff_ms, sleep=sleep
        )
    ledger = PostgresLedger(pool)
    for attempt in range(1, attempts + 1):
        try:
            await ledger.ping()
            return ledger
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            log.warning("ledger not reachable", attempt=attempt, attempts=attempts, error=str(exc))
            if attempt == attempts:
                raise LedgerUnavailableError(
                    f"the PostgreSQL ledger did not answer after {attempts} tries"
                ) from exc
            await sleep(backoff_ms * attempt / 1000)
    raise AssertionError("unreachable")
