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


def owner_of(process: PaymanagerProcess) -> str:
    """The lease owner (and process id) a paymanager process runs under."""
    return f"{socket.gethostname()}.{process.proc.pid}"


async def held_by(pool: asyncpg.Pool, process: PaymanagerProcess) -> int:
    """How many running jobs `process` holds under its lease."""
    return int(
        await pool.fetchval(
            "SELECT count(*) FROM job WHERE state = 'running' AND lease_owner = $1", owner_of(process)
        )
    )


async def wait_backends_gone(pool: asyncpg.Pool, process: PaymanagerProcess, timeout_s: float) -> None:
    """Wait until the server has ended every session of a killed `process`: a COMMIT it sent just
    before it died still commits, so what it held is only known once its sessions are gone."""
    deadline = time.monotonic() + timeout_s
    name = f"paymanager:{owner_of(process)}"
    while await pool.fetchval("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", name):
        assert time.monotonic() < deadline, f"the sessions of {name} outlived it by {timeout_s} s"
        await asyncio.sleep(HOLDING_POLL_INTERVAL_S)


async def wait_holding(pool: asyncpg.Pool, process: PaymanagerProcess, timeout_s: float) -> bool:
    """Whether `process` was seen holding running jobs within `timeout_s` (settlement is fast
    enough that a kill at a random moment can find a worker between claims)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await held_by(pool, process):
            return True
        await asyncio.sleep(HOLDING_POLL_INTERVAL_S)
    return False


async def kill_holding(
    pool: asyncpg.Pool,
    env: dict[str, str],
    victims: list[PaymanagerProcess],
    timeout_s: float,
    tries: int = 5,
) -> int:
    """SIGKILL a worker while it holds running jobs; returns how many it died holding (they keep
    its leases until those expire). The first worker killed is the caller's newest in `victims`
    when it is still alive: started beside the survivor, it is at work when the kill is due, where
    a worker started now could find the survivor has drained the outbox while it was starting. A
    worker seen holding jobs can finish them between the look and the kill, and then its death
    interrupts nothing: another worker is started and killed the same way, up to `tries` times.
    Every worker started is appended to `victims` for the caller to close."""
    for attempt in range(tries):
        if attempt == 0 and victims and victims[-1].proc.poll() is None:
            victim = victims[-1]
        else:
            victim = PaymanagerProcess(env)
            victims.append(victim)
        assert await wait_holding(pool, victim, timeout_s), victim.output[-3000:]
        victim.kill()
        await wait_backends_gone(pool, victim, timeout_s=30)
        held = await held_by(pool, victim)
        if held:
            return held
    raise AssertionError(f"none of {tries} workers died holding a job")


async def wait_rescued(pool: asyncpg.Pool, victims: list[PaymanagerProcess], timeout_s: float) -> None:
    """Wait until the rescuer took back every job the killed `victims` died holding (after their
    leases expired). Their intents may be final already, settled by the sweep's jobs for them: the
    rescued jobs then find them final and complete without moving money again."""
    owners = [owner_of(victim) for victim in victims]
    deadline = time.monotonic() + timeout_s
    while await pool.fetchval(
        "SELECT count(*) FROM job WHERE state = 'running' AND lease_owner = ANY($1)", owners
    ):
        assert time.monotonic() < deadline, f"jobs of {owners} still running after {timeout_s} s"
        await asyncio.sleep(POLL_INTERVAL_S)
