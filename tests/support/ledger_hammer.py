"""A worker process of the concurrency test: random batches among a few hot accounts.

Usage: python -m tests.support.ledger_hammer DSN OFFSET SEED BATCHES
Prints one JSON line: the ids of the transfers this process saw `created`.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys

from paymanager.ledger import AMOUNT_MAX, CreateTransferResult, PostgresLedger, Transfer, TransferFlags

WALLETS = [1, 2, 3, 4]
SHARED_IDS = range(1_000, 1_050)  # ids every process may use, always with the same content


def shared_transfer(offset: int, shared: int) -> Transfer:
    rng = random.Random(shared)
    debit, credit = rng.sample(WALLETS, 2)
    return Transfer(
        id=offset + shared,
        debit_account_id=offset + debit,
        credit_account_id=offset + credit,
        amount=rng.randint(1, 200),
        ledger=1,
        code=1,
    )


def batch(rng: random.Random, offset: int, next_id: list[int]) -> list[Transfer]:
    events: list[Transfer] = []
    for _ in range(rng.randint(1, 20)):
        if rng.random() < 0.1:
            events.append(shared_transfer(offset, rng.choice(SHARED_IDS)))
            continue
        debit, credit = rng.sample(WALLETS, 2)
        next_id[0] += 1
        kind = rng.random()
        flags = TransferFlags.LINKED if rng.random() < 0.2 else 0
        if kind < 0.2:
            pending_id = next_id[0]
            events.append(
                Transfer(
                    pending_id,
                    offset + debit,
                    offset + credit,
                    rng.randint(1, 300),
                    ledger=1,
                    code=1,
                    flags=flags | TransferFlags.PENDING,
                )
            )
            next_id[0] += 1
            post = (
                TransferFlags.POST_PENDING_TRANSFER
                if rng.random() < 0.7
                else TransferFlags.VOID_PENDING_TRANSFER
            )
            amount = AMOUNT_MAX if post == TransferFlags.POST_PENDING_TRANSFER else 0
            events.append(Transfer(next_id[0], amount=amount, pending_id=pending_id, flags=post))
        else:
            events.append(
                Transfer(
                    next_id[0],
                    offset + debit,
                    offset + credit,
                    rng.randint(1, 300),
                    ledger=1,
                    code=1,
                    flags=flags,
                )
            )
    if events[-1].flags & TransferFlags.LINKED:
        last = events[-1]
        events[-1] = Transfer(
            last.id,
            last.debit_account_id,
            last.credit_account_id,
            last.amount,
            last.pending_id,
            ledger=last.ledger,
            code=last.code,
            flags=last.flags & ~TransferFlags.LINKED,
        )
    return events


async def main(dsn: str, offset: int, seed: int, batches: int) -> list[int]:
    rng = random.Random(seed)
    # Pending ids of this process live in their own range so that processes do not share them.
    next_id = [offset + 10_000_000 * (seed + 1)]
    ledger = await PostgresLedger.connect(dsn, max_size=2)
    created: list[int] = []
    try:
        for _ in range(batches):
            events = batch(rng, offset, next_id)
            results = await ledger.create_transfers(events)
            created += [
                e.id for e, r in zip(events, results, strict=True) if r.result is CreateTransferResult.created
            ]
    finally:
        await ledger.close()
    return created


if __name__ == "__main__":
    dsn, offset, seed, batches = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    print(json.dumps(asyncio.run(main(dsn, offset, seed, batches))))
