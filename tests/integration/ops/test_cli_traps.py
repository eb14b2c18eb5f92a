"""The CLI's traps: a replay with no filter, a pause of a queue that does not exist, `--json`, the
header of `jobs ls`; and its admin actions audited with the operator as the actor."""

from __future__ import annotations

import asyncio

import asyncpg
import orjson

from paymanager.jobs import enqueue
from tests.support.processes import paymanager_env, run_cli


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
