"""The CLI's traps: a replay with no filter, a pause of a queue that does not exist, `--json`, the
header of `jobs ls`; and its admin actions audited with the operator as the actor."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import orjson

from paymanager.jobs import enqueue
from tests.integration.payments.conftest import Api
from tests.support.processes import paymanager_env, run_cli
from tests.support.signed_client import SignedClient


async def cli(database_url: str, *args: str) -> tuple[int, str]:
    result = await asyncio.to_thread(run_cli, ["jobs", *args], paymanager_env(database_url))
    return result.returncode, result.stdout + result.stderr


async def _dead(pool: asyncpg.Pool, queue: str = "outbox") -> int:
    job = await enqueue(pool, "settle", {"intent_id": "5f0c4a52-0000-4000-8000-000000000001"}, queue=queue)
    await pool.execute(
        "UPDATE job SET state = 'dead', finalized_at = now(), last_error = $2 WHERE id = $1",
        job.id, {"error": "psp timeout"},
    )  # fmt: skip
    return job.id


async def test_a_replay_with_no_filter_refuses_unless_all(pool: asyncpg.Pool, database_url: str) -> None:
    job_id = await _dead(pool)
    code, out = await cli(database_url, "replay")
    assert code == 2
    assert "--all" in out
    assert await pool.fetchval("SELECT state FROM job WHERE id = $1", job_id) == "dead"
    code, out = await cli(database_url, "replay", "--all")
    assert (code, out.strip()) == (0, "replayed 1 dead job(s)")
    audit = await pool.fetchrow("SELECT actor, via, action, after FROM admin_audit")
    assert audit["actor"].startswith("cli:")
    assert (audit["via"], audit["action"]) == ("cli", "job.replay")
    assert audit["after"]["replayed"] == [job_id]


async def test_pausing_a_queue_that_does_not_exist_refuses_with_a_suggestion(
    pool: asyncpg.Pool, database_url: str
) -> None:
    await _dead(pool)
    code, out = await cli(database_url, "pause", "outbx")
    assert code == 2
    assert "no queue named 'outbx'; did you mean 'outbox'?" in out
    assert "Traceback" not in out
    assert await pool.fetchval("SELECT count(*) FROM job_queue WHERE name = 'outbx'") == 0


async def test_jobs_ls_has_a_header_filters_by_intent_and_speaks_json(
    pool: asyncpg.Pool, database_url: str
) -> None:
    job_id = await _dead(pool)
    code, out = await cli(database_url, "ls")
    assert code == 0
    assert out.splitlines()[0].split()[:5] == ["ID", "STATE", "QUEUE", "KIND", "ATTEMPT"]
    code, out = await cli(database_url, "ls", "--json", "--intent", "5f0c4a52-0000-4000-8000-000000000001")
    assert code == 0
    rows = [orjson.loads(line) for line in out.splitlines()]
    assert [(r["id"], r["state"]) for r in rows] == [(job_id, "dead")]
    code, out = await cli(database_url, "ls", "--intent", "5f0c4a52-0000-4000-8000-000000000002")
    assert (code, out.strip()) == (0, "no jobs")
    code, out = await cli(database_url, "stats", "--json")
    assert code == 0
    assert orjson.loads(out.splitlines()[0])["counts"] == {"dead": 1}


async def run(database_url: str, *args: str) -> tuple[int, str, str]:
    result = await asyncio.to_thread(run_cli, list(args), paymanager_env(database_url))
    return result.returncode, result.stdout, result.stderr


async def test_ledger_balance_takes_the_api_account_id_and_the_ledger_id_the_api_shows(
    api: Api, database_url: str
) -> None:
    account_id = await api.client.open_account()
    shown = (await api.client.get(f"/accounts/{account_id}")).json()
    assert shown["ledger_account_id"] == str(uuid.UUID(account_id).int)
    await api.admin.fund(account_id, 700)
    balance = (await api.client.get(f"/accounts/{account_id}/balance")).json()
    assert balance["ledger_account_id"] == shown["ledger_account_id"]
    for given in (account_id, shown["ledger_account_id"], hex(uuid.UUID(account_id).int)):
        code, out, err = await run(database_url, "ledger", "balance", given, "--json")
        assert code == 0, err
        figures = orjson.loads(out)
        assert figures["account"] == shown["ledger_account_id"]
        assert {k: figures[k] for k in ("posted", "pending", "available")} == {
            k: balance[k] for k in ("posted", "pending", "available")
        }
        # Confirmed, not yet settled (no outbox worker here): the money is a pending credit.
        assert figures["posted"] + figures["pending"] == 700, figures
    code, out, err = await run(database_url, "ledger", "transfers", account_id, "--json")
    assert code == 0, err
    assert [t["amount"] for t in orjson.loads(out) if t["side"] == "credit"][:1] == [700]


async def test_services_disable_and_rotate_secret_are_the_audited_admin_actions(
    api: Api, database_url: str, pool: asyncpg.Pool
) -> None:
    code, out, _ = await run(database_url, "services", "create", "to-retire")
    service_id = out.split()[1]
    code, out, err = await run(database_url, "services", "rotate-secret", service_id)
    assert code == 0, err
    new_secret = out.splitlines()[1].split()[1]
    assert new_secret.startswith("sk_")
    rotated = SignedClient(api.http, service_id, new_secret)
    assert (await rotated.get("/intents")).status_code == 200, "the new secret signs"
    code, out, err = await run(database_url, "services", "disable", service_id)
    assert (code, out.strip()) == (0, f"{service_id}: disabled"), err
    code, out, _ = await run(database_url, "services", "list", "--json")
    (listed,) = [s for s in orjson.loads(out) if s["id"] == service_id]
    assert listed["disabled_at"] is not None
    actions = await pool.fetch(
        "SELECT actor, via, action FROM admin_audit WHERE target = $1 ORDER BY id", f"service:{service_id}"
    )
    assert [(a["via"], a["action"]) for a in actions] == [
        ("cli", "service.create"), ("cli", "service.rotate_secret"), ("cli", "service.disable"),
    ]  # fmt: skip
    assert all(a["actor"].startswith("cli:") for a in actions)
    code, _, err = await run(database_url, "services", "disable", "svc_" + "f" * 32)
    assert code == 1
    assert "no service" in err


async def test_read_commands_speak_json(pool: asyncpg.Pool, database_url: str) -> None:
    job_id = await _dead(pool)
    for args in (
        ["jobs", "show", str(job_id), "--json"],
        ["jobs", "stats", "--json"],
        ["ledger", "accounts", "--json"],
        ["ledger", "verify", "--json"],
        ["services", "list", "--json"],
        ["migrate", "--status", "--json"],
        ["config", "--json"],
    ):
        code, out, err = await run(database_url, *args)
        assert code == 0, (args, err)
        assert len(out.strip().splitlines()) == 1, (args, out)
        orjson.loads(out)
    for args in (["psp", "ls", "--json"], ["webhooks", "ls", "--json"]):
        code, out, err = await run(database_url, *args)
        assert (code, out) == (0, ""), (args, err)  # JSON lines: none on an empty database
