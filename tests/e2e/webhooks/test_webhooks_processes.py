"""Webhooks across real processes: an api process, two headless outbox workers, the merchant sandbox
over HTTP; each event reaches each endpoint once; the CLI lists and replays deliveries."""

from __future__ import annotations

import asyncio
from collections import Counter

import asyncpg
import httpx

from paymanager.sandbox.merchant import MerchantReceiver
from tests.support.processes import PaymanagerProcess, paymanager_env, run_cli
from tests.support.servers import create_service, start_server
from tests.support.signed_client import SignedClient
from tests.support.waiting import wait_until

INTENTS = 10


async def _settle(shop: SignedClient, admin: SignedClient, pool: asyncpg.Pool) -> str:
    payer = await shop.open_account()
    payee = await shop.open_account()
    funding = await admin.fund(payer, 1_000)

    async def funded() -> bool:
        status = await pool.fetchval("SELECT status FROM intent WHERE id = $1::uuid", funding["id"])
        return bool(status == "settled")

    await wait_until(funded, 30)
    body = {"channel": "internal-p2p", "amount": 100, "currency": "THB",
            "payer_account_id": payer, "payee_account_id": payee}  # fmt: skip
    created = await shop.post("/intents", body)
    assert (await shop.post(f"/intents/{created.json()['id']}/confirm")).status_code == 200
    return str(created.json()["id"])


async def test_two_worker_processes_deliver_each_event_once_per_endpoint(database_url: str) -> None:
    receiver = MerchantReceiver()
    base = await receiver.start()
    extra = {"WEBHOOK_ALLOWED_HOSTS": "127.0.0.1"}
    api, url, env = start_server(database_url, "api", **extra)
    workers = [
        PaymanagerProcess(paymanager_env(database_url, WORKER_ROLES="outbox-worker", **extra))
        for _ in range(2)
    ]
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2)
    try:
        for worker in workers:
            worker.wait_for_line("started in headless mode")
        admin_ids = create_service(env, "admin", admin=True)
        shop_ids = create_service(env, "shop", admin=False)
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:
            admin = SignedClient(http, admin_ids.id, admin_ids.secret)
            shop = SignedClient(http, shop_ids.id, shop_ids.secret)
            for path in ("/one", "/two"):
                made = await shop.post("/webhook-endpoints", {"url": base + path, "event_types": ["*"]})
                assert made.status_code == 201, made.text
                receiver.set_path(path, secrets=[made.json()["secret"]])
            await asyncio.gather(*(_settle(shop, admin, pool) for _ in range(INTENTS)))

            async def all_delivered() -> bool:
                done = await pool.fetchval("SELECT count(*) FROM webhook_delivery WHERE status = 'succeeded'")
                return bool(done == 2 * 3 * INTENTS)

            await wait_until(all_delivered, 60)
        for path in ("/one", "/two"):
            got = receiver.received_on(path)
            assert all(r.verified and r.answered == 200 for r in got)
            per_event = Counter(r.event_id for r in got)
            assert len(per_event) == 3 * INTENTS
            assert set(per_event.values()) == {1}, "no event reached an endpoint twice"
        assert await pool.fetchval("SELECT max(attempts) FROM webhook_delivery") == 1

        listed = run_cli(["webhooks", "ls", "--status", "succeeded", "--limit", "5"], env)
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.count("succeeded") == 5
        one = await pool.fetchval("SELECT id FROM webhook_delivery ORDER BY created_at LIMIT 1")
        replayed = run_cli(["webhooks", "replay", one], env)
        assert replayed.returncode == 0, replayed.stderr
        assert f"replayed {one}" in replayed.stdout

        async def replay_arrived() -> bool:
            row = await pool.fetchrow("SELECT status, attempts FROM webhook_delivery WHERE id = $1", one)
            return bool(row["status"] == "succeeded" and row["attempts"] == 2)

        await wait_until(replay_arrived, 30)
        refused = run_cli(["webhooks", "replay", "whd_unknown"], env)
        assert refused.returncode == 1
        assert "no such webhook delivery" in refused.stderr
    finally:
        await pool.close()
        for worker in workers:
            assert worker.terminate() == 0, worker.output
            worker.close()
        assert api.terminate() == 0, api.output
        api.close()
        await receiver.stop()


def test_the_sandbox_merchant_command_serves_and_verifies(database_url: str) -> None:
    del database_url
    from paymanager.webhooks import sign
    from tests.support.processes import free_port

    port = free_port()
    env = paymanager_env("postgresql://unused")
    process = PaymanagerProcess(env, ["sandbox", "merchant", "--port", str(port), "--secret", "whsec_cli"])
    try:
        process.wait_for_line("merchant sandbox listening")
        body = b'{"id":"evt_x","type":"intent.settled"}'
        import time

        good = {
            "Paymanager-Signature": sign(body, ["whsec_cli"], int(time.time())),
            "Paymanager-Event-Id": "evt_x",
        }
        bad = {"Paymanager-Signature": sign(body, ["whsec_other"], int(time.time()))}
        with httpx.Client(base_url=f"http://127.0.0.1:{port}") as http:
            assert http.post("/hook", content=body, headers=good).status_code == 200
            assert http.post("/hook", content=body, headers=good).status_code == 400  # replayed
            assert http.post("/hook", content=body, headers=bad).status_code == 400
            http.post("/_control/paths", json={"path": "/gone", "mode": "gone"})
            assert http.post("/gone", content=body).status_code == 410
            received = http.get("/_control/received").json()["received"]
        assert [r["reason"] for r in received] == [None, "replayed", "bad_signature", None]
    finally:
        process.terminate()
        process.close()
