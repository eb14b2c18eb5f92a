"""The set-up the settlement chaos tests share (PostgreSQL and TigerBeetle ledgers, one worker killed
or one replica killed): funded payers, confirmed p2p intents waiting in the outbox, and the waits
that watch them settle."""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from dataclasses import dataclass

import asyncpg

from paymanager.application.accounts.use_cases import OpenAccount, open_account
from paymanager.application.context import Payments
from paymanager.application.intents.confirm import confirm_intent
from paymanager.application.intents.create import IntentRequest, create_intent
from paymanager.application.intents.events import Pending
from paymanager.application.intents.settle import settle
from paymanager.application.services.use_cases import ServiceIdentity
from paymanager.domain.channels import AccountKind
from tests.support.processes import PaymanagerProcess

AMOUNT = 100
CONFIRM_BATCH = 100
# How often the waits below look at the intents again; each caller's timeout is the bound.
POLL_INTERVAL_S = 0.1
HOLDING_POLL_INTERVAL_S = 0.002


@dataclass(frozen=True)
class Parties:
    payers: list[uuid.UUID]
    payees: list[uuid.UUID]


async def seed_parties(
    payments: Payments, caller: ServiceIdentity, admin: ServiceIdentity, count: int, funding: int
) -> Parties:
    """`count` payers funded with `funding` each (settled admin-transfers) and `count` payees."""
    payers, payees = [], []
    async with payments.pool.acquire() as conn, conn.transaction():
        for _ in range(count):
            payers.append(
                (await open_account(payments, conn, caller, OpenAccount(AccountKind.USER, "THB"))).id
            )
            payees.append(
                (await open_account(payments, conn, caller, OpenAccount(AccountKind.USER, "THB"))).id
            )
        for payer in payers:
            top_up = IntentRequest("admin-transfer", funding, "THB", payee_account_id=payer)
            row = await create_intent(payments, conn, admin, top_up, [])
            await confirm_intent(payments, conn, admin, row.id, Pending())
            await settle(payments, conn, row.id, settled_by="test")
    return Parties(payers, payees)


async def confirm_p2p_intents(
    payments: Payments, caller: ServiceIdentity, parties: Parties, intents: int
) -> None:
    """`intents` p2p intents of AMOUNT, created and confirmed round-robin over the parties; their
    settle jobs wait in the outbox for a worker."""
    count = len(parties.payers)
    for start in range(0, intents, CONFIRM_BATCH):
        async with payments.pool.acquire() as conn, conn.transaction():
            for i in range(start, min(start + CONFIRM_BATCH, intents)):
                request = IntentRequest(
                    "internal-p2p", AMOUNT, "THB", parties.payers[i % count], parties.payees[i % count]
                )
                row = await create_intent(payments, conn, caller, request, [])
                await confirm_intent(payments, conn, caller, row.id, Pending())


async def count_p2p(pool: asyncpg.Pool, status: str) -> int:
    return int(
        await pool.fetchval(
            "SELECT count(*) FROM intent WHERE channel = 'internal-p2p' AND status = $1", status
        )
    )


async def wait_settled(pool: asyncpg.Pool, at_least: int, timeout_s: float) -> int:
    """The p2p intents settled once at least `at_least` are, or when `timeout_s` ran out."""
    deadline = time.monotonic() + timeout_s
    settled = await count_p2p(pool, "settled")
    while settled < at_least and time.monotonic() < deadline:
        await asyncio.sleep(POLL_INTERVAL_S)
        settled = await count_p2p(pool, "settled")
    return settled


async def wait_holding(pool: asyncpg.Pool, process: PaymanagerProcess, timeout_s: float) -> bool:
    """Whether `process` was seen holding running jobs within `timeout_s` (settlement is fast
    enough that a kill at a random moment can find a worker between claims)."""
    owner = f"{socket.gethostname()}.{process.proc.pid}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        held = await pool.fetchval(
            "SELECT count(*) FROM job WHERE state = 'running' AND lease_owner = $1", owner
        )
        if held:
            return True
        await asyncio.sleep(HOLDING_POLL_INTERVAL_S)
    return False
