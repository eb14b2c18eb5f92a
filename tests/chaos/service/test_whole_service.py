"""The whole service under faults: an api, two outbox-workers and an invoice-expiry process on a
PostgreSQL and a Redis of the test's own. While signed clients create and confirm p2p intents, a
random outbox-worker is killed with SIGKILL about every second (and replaced), Redis is down for
ten seconds and PostgreSQL crashes and restarts once. Then: every intent a client saw confirmed is
settled exactly once, the others are untouched, the ledger verifies, and the api never crashed.

`CHAOS_SCALE` (default 1, `make chaos` uses 5) multiplies the intents and the length of the run.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import httpx
import pytest

from paymanager.db import migrations
from tests.support.private_postgres import PrivatePostgres
from tests.support.private_redis import PrivateRedis
from tests.support.processes import PaymanagerProcess, free_port, paymanager_env, run_cli
from tests.support.servers import create_service
from tests.support.signed_client import SignedClient

pytestmark = pytest.mark.slow

SCALE = max(1, int(os.environ.get("CHAOS_SCALE", "1")))
LOAD_SEC = 20 * SCALE
CLIENTS = 6
PAYERS = 10
AMOUNT = 100
FUNDING = 100_000_000
KILL_EVERY_SEC = 1.0
REDIS_DOWN_AT_SEC, REDIS_DOWN_FOR_SEC = 3.0, 10.0
PG_CRASH_AT_SEC, PG_DOWN_FOR_SEC = 8.0, 2.0
RETRY_BUDGET_SEC = 30.0
SETTLE_TIMEOUT_SEC = 180.0


@dataclass
class Figures:
    confirmed: list[str] = field(default_factory=list)
    abandoned: int = 0
    answers_503: int = 0
    connection_errors: int = 0
    kills: int = 0


@pytest.fixture
def private_pg(tmp_path: Path) -> Iterator[PrivatePostgres]:
    server = PrivatePostgres(tmp_path)
    yield server
    server.close()


@pytest.fixture
def private_redis() -> Iterator[PrivateRedis]:
    server = PrivateRedis()
    yield server
    server.close()


async def _send(
    client: SignedClient, figures: Figures, path: str, payload: object | None
) -> httpx.Response | None:
    """A POST sent again under the same Idempotency-Key after a 503 or a lost connection, as a
    client must; None when the retry budget ran out."""
    key = str(uuid.uuid4())
    deadline = time.monotonic() + RETRY_BUDGET_SEC
    while time.monotonic() < deadline:
        try:
            response = await client.post(path, payload, key=key)
        except httpx.TransportError:
            figures.connection_errors += 1
        else:
            if response.status_code != 503:
                return response
            figures.answers_503 += 1
        await asyncio.sleep(0.2)
    return None


async def _client_loop(
    client: SignedClient, payers: list[str], payees: list[str], figures: Figures, until: float
) -> None:
    rng = random.Random()
    while time.monotonic() < until:
        i = rng.randrange(PAYERS)
        body = {"channel": "internal-p2p", "amount": AMOUNT, "currency": "THB",
                "payer_account_id": payers[i], "payee_account_id": payees[i]}  # fmt: skip
        created = await _send(client, figures, "/intents", body)
        if created is None:
            figures.abandoned += 1
            continue
        assert created.status_code == 201, created.text
        intent_id = created.json()["id"]
        confirmed = await _send(client, figures, f"/intents/{intent_id}/confirm", None)
        if confirmed is None:
            figures.abandoned += 1
            continue
        assert confirmed.status_code == 200, confirmed.text
        figures.confirmed.append(intent_id)


class Workers:
    """Two outbox-workers kept alive while one at a time is killed with SIGKILL."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.alive = [PaymanagerProcess(env), PaymanagerProcess(env)]
        self.dead: list[PaymanagerProcess] = []

    def kill_one(self, rng: random.Random) -> None:
        victim = self.alive.pop(rng.randrange(len(self.alive)))
        victim.kill()
        self.dead.append(victim)
        self.alive.append(PaymanagerProcess(self.env))

    def replace_exited(self) -> None:
        for process in list(self.alive):
            if process.proc.poll() is not None:  # exited by itself (e.g. started while PostgreSQL was down)
                self.alive.remove(process)
                self.dead.append(process)
                self.alive.append(PaymanagerProcess(self.env))

    def close(self) -> None:
        for process in self.alive + self.dead:
            process.close()


async def _chaos(
    workers: Workers, private_pg: PrivatePostgres, private_redis: PrivateRedis, figures: Figures, until: float
) -> None:
    rng = random.Random()
    start = time.monotonic()
    redis_down = pg_crashed = False
    while time.monotonic() < until:
        await asyncio.sleep(KILL_EVERY_SEC * rng.uniform(0.5, 1.5))
        elapsed = time.monotonic() - start
        workers.replace_exited()
        workers.kill_one(rng)
        figures.kills += 1
        if not redis_down and elapsed >= REDIS_DOWN_AT_SEC:
            redis_down = True
            private_redis.stop()
            asyncio.get_running_loop().call_later(REDIS_DOWN_FOR_SEC, private_redis.start)
        if not pg_crashed and elapsed >= PG_CRASH_AT_SEC:
            pg_crashed = True
            await asyncio.to_thread(private_pg.stop)
            await asyncio.sleep(PG_DOWN_FOR_SEC)
            await asyncio.to_thread(private_pg.start)


async def _wait_settled(pool: asyncpg.Pool, intent_ids: list[str], workers: Workers) -> int:
    deadline = time.monotonic() + SETTLE_TIMEOUT_SEC
    while True:
        settled = int(
            await pool.fetchval(
                "SELECT count(*) FROM intent WHERE id = ANY($1::uuid[]) AND status = 'settled'", intent_ids
            )
        )
        if settled == len(intent_ids) or time.monotonic() > deadline:
            return settled
        workers.replace_exited()
        await asyncio.sleep(0.5)


async def test_the_service_survives_kills_and_outages_with_every_intent_settled_once(
    private_pg: PrivatePostgres, private_redis: PrivateRedis
) -> None:
    conn = await asyncpg.connect(private_pg.url)
    try:
        await migrations.migrate(conn)
    finally:
        await conn.close()
    port = free_port()
    common = {"REDIS_URL": private_redis.url, "JOB_LEASE_MS": "2000", "JOB_HEARTBEAT_INTERVAL_MS": "500",
              "JOB_RESCUE_INTERVAL_MS": "500"}  # fmt: skip
    api_env = paymanager_env(private_pg.url, WORKER_ROLES="api,invoice-expiry", PORT=str(port), **common)
    api = PaymanagerProcess(api_env)
    workers = Workers(paymanager_env(private_pg.url, WORKER_ROLES="outbox-worker", **common))
    figures = Figures()
    try:
        api.wait_for_line('"listening"')
        admin_service = create_service(api_env, "chaos-admin", admin=True)
        shop_service = create_service(api_env, "chaos-shop", admin=False)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
            admin = SignedClient(http, admin_service.id, admin_service.secret)
            shop = SignedClient(http, shop_service.id, shop_service.secret)
            payers = [await shop.open_account() for _ in range(PAYERS)]
            payees = [await shop.open_account() for _ in range(PAYERS)]
            for payer in payers:
                await admin.fund(payer, FUNDING)
            until = time.monotonic() + LOAD_SEC
            started = time.monotonic()
            await asyncio.gather(
                _chaos(workers, private_pg, private_redis, figures, until),
                *(_client_loop(shop, payers, payees, figures, until) for _ in range(CLIENTS)),
            )
        pool = await asyncpg.create_pool(private_pg.url, min_size=1, max_size=2)
        try:
            settled = await _wait_settled(pool, figures.confirmed, workers)
            drained_sec = time.monotonic() - started - LOAD_SEC
            assert settled == len(figures.confirmed), workers.alive[0].output[-3000:]
            await _assert_settled_exactly_once(pool)
        finally:
            await pool.close()
        verify = run_cli(["ledger", "verify"], api_env)
        assert verify.returncode == 0, verify.stdout + verify.stderr
        assert api.proc.poll() is None, api.output[-3000:]
        assert "unhandled error" not in api.output, api.output[-3000:]
    finally:
        api.close()
        workers.close()
    print(
        f"\nchaos: {len(figures.confirmed)} intents confirmed and settled once, "
        f"{figures.abandoned} abandoned, {figures.kills} worker kills, {figures.answers_503} answers 503 "
        f"and {figures.connection_errors} lost connections retried, drained {drained_sec:.1f} s after "
        "the load ended"
    )
    assert figures.confirmed, "no intent got through: the run proved nothing"


async def _assert_settled_exactly_once(pool: asyncpg.Pool) -> None:
    # A settled p2p intent has one settlement row and its legs (amount, fee) each pending once and
    # posted once; a created one has no transfer at all.
    doubled = await pool.fetchval(
        "SELECT count(*) FROM intent AS i WHERE i.channel = 'internal-p2p' AND i.status = 'settled' AND"
        " (SELECT count(*) FILTER (WHERE t.flags & 4 <> 0) * 10 + count(*) FILTER (WHERE t.flags & 8 <> 0)"
        "    FROM ledger_transfer AS t WHERE t.user_data_128 = i.id)"
        " <> CASE WHEN i.fee > 0 THEN 20 ELSE 10 END"
    )
    assert doubled == 0
    settlements = await pool.fetchval(
        "SELECT count(*) FROM (SELECT intent_id FROM settlement GROUP BY intent_id HAVING count(*) > 1) AS d"
    )
    assert settlements == 0
    stray = await pool.fetchval(
        "SELECT count(*) FROM intent AS i WHERE i.channel = 'internal-p2p' AND i.status = 'created'"
        " AND EXISTS (SELECT FROM ledger_transfer AS t WHERE t.user_data_128 = i.id)"
    )
    assert stray == 0
    unfinished = await pool.fetchval(
        "SELECT count(*) FROM intent WHERE channel = 'internal-p2p' AND status NOT IN ('created', 'settled')"
    )
    assert unfinished == 0
