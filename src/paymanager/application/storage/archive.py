"""Detaching a month of history for archiving (docs/OPERATIONS.md, "Archiving history").

`detach_month` detaches the partitions of one month (or `before`: everything before the partitions by
month began) from settlement, intent and ledger_transfer, in that order, each with `DETACH PARTITION
... CONCURRENTLY`: it takes no lock that stops the writers and readers of the other months, and waits
for the transactions that may still use the partition to end. A settlement's partition is detached
before its intents' (its foreign keys, kept by the detached table, are dropped between); the
ledger's detached month then has its sums per account recorded (`ledger_transfer_archive`), so
`paymanager ledger verify` still holds. The detached tables stay in the database, untouched, for the
operator to dump and drop.

A month is refused while it holds intents not yet finished (a settlement job would find its intent
gone) or pending ledger transfers not resolved.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from paymanager.application.storage.store import StorageStore
from paymanager.db.pool import Conn

_MONTH = re.compile(r"^\d{4}-(0[1-9]|1[0-2])$")


class ArchiveRefusedError(Exception):
    """The month cannot be detached now; the message says why."""


@dataclass(frozen=True, slots=True)
class DetachedMonth:
    """The tables detached (now plain tables, ready to dump and drop) and the rows each holds."""

    tables: dict[str, int]


def partition_suffix(month: str) -> str:
    """`2026-01` -> `p2026_01`; `before` -> `p_before`; anything else is refused."""
    if month != "before" and not _MONTH.match(month):
        raise ArchiveRefusedError(f"a month is YYYY-MM or 'before', not {month!r}")
    return "p_before" if month == "before" else "p" + month.replace("-", "_")


_UNFINISHED = "status IN ('created', 'confirmed', 'requires_capture')"
_PENDING = "flags & 2 <> 0 AND id IN (SELECT p.id FROM ledger_pending AS p WHERE p.state = 'pending')"


async def detach_month(conn: Conn, month: str) -> DetachedMonth:
    """Detach the month's partitions; `conn` must not be in a transaction (CONCURRENTLY needs its own).

    Safe to run again after a failure: a table already detached is skipped, and the ledger's sums
    are recorded once."""
    suffix = partition_suffix(month)
    store = StorageStore(conn)
    names = {parent: f"{parent}_{suffix}" for parent in ("settlement", "intent", "ledger_transfer")}
    existing = await store.existing_tables(names=list(names.values()))
    attached = await store.attached_partitions(names=list(names.values()))
    intents, transfers = names["intent"], names["ledger_transfer"]
    if intents in attached and (unfinished := await store.count(partition=intents, where=_UNFINISHED)):
        raise ArchiveRefusedError(f"{intents} holds {unfinished} intents not yet finished")
    if transfers in attached and (pending := await store.count(partition=transfers, where=_PENDING)):
        raise ArchiveRefusedError(f"{transfers} holds {pending} pending transfers not yet resolved")
    for parent, name in names.items():
        if name in attached:
            await store.detach_concurrently(parent=parent, partition=name)
        if parent == "settlement" and name in existing:
            await store.release(partition=name)
    if transfers in existing and not await store.ledger_archived(partition=transfers):
        await store.archive_ledger(partition=transfers)
    return DetachedMonth({name: await store.count(partition=name) for name in sorted(existing)})
