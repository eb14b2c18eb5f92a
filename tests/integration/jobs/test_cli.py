from __future__ import annotations

import asyncio

import asyncpg

from paymanager.jobs import enqueue
from tests.support.processes import paymanager_env, run_cli


async def cli(database_url: str, *args: str) -> tuple[int, str]:
    result = await asyncio.to_thread(run_cli, ["jobs", *args], paymanager_env(database_url))
    return result.returncode, result.stdout + result.stderr


async def test_cli_lists_shows_replays_and_reports_dead_jobs(pool: asyncpg.Pool, database_url: str) -> None:
    job = await enqueue(pool, "settle", {"intent": 7})
    await pool.execute(
        "UPDATE job SET state = 'dead', finalized_at = now(), last_error = $2 WHERE id = $1",
        job.id,
        {"error": "psp timeout", "type": "RuntimeError"},
    )
    code, out = await cli(database_url, "ls", "--state", "dead")
    assert code == 0
    assert "psp timeout" in out
    assert str(job.id) in out
    code, out = await cli(database_url, "show", str(job.id))
    assert code == 0
    assert '"intent": 7' in out
    code, out = await cli(database_url, "replay", "--error", "psp")
    assert (code, out.strip()) == (0, "replayed 1 dead job(s)")
    assert await pool.fetchval("SELECT state FROM job WHERE id = $1", job.id) == "available"
    code, out = await cli(database_url, "stats")
    assert "default: available=1" in out


async def test_cli_pauses_resumes_and_cancels(pool: asyncpg.Pool, database_url: str) -> None:
    job = await enqueue(pool, "k", {})
    assert (await cli(database_url, "pause", "default"))[0] == 0
    assert await pool.fetchval("SELECT paused FROM job_queue WHERE name = 'default'") is True
    assert (await cli(database_url, "resume", "default"))[0] == 0
    assert await pool.fetchval("SELECT paused FROM job_queue WHERE name = 'default'") is False
    code, out = await cli(database_url, "cancel", str(job.id))
    assert (code, out.strip()) == (0, f"job {job.id}: cancelled")
    code, _ = await cli(database_url, "cancel", str(job.id))
    assert code == 1


async def test_cli_refuses_bad_input_with_a_message_and_exit_code_2(database_url: str) -> None:
    for args, message in (
        (("pause", "no such queue!"), "queue 'no such queue!' must match"),
        (("show", str(2**63)), "job id must be within"),
    ):
        code, out = await cli(database_url, *args)
        assert code == 2, out
        assert message in out
        assert "Traceback" not in out
