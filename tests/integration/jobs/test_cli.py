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


def run_cli_with_input(database_url: str, args: list[str], answer: str) -> tuple[int, str]:
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "paymanager", "jobs", *args],
        env=paymanager_env(database_url), input=answer, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    return result.returncode, result.stdout + result.stderr


async def test_cli_drain_and_obliterate_ask_for_confirmation(pool: asyncpg.Pool, database_url: str) -> None:
    await enqueue(pool, "k", {}, queue="q")
    for command in ("drain", "obliterate"):
        code, out = await asyncio.to_thread(run_cli_with_input, database_url, [command, "q"], "n\n")
        assert code == 1, out
        assert await pool.fetchval("SELECT count(*) FROM job") == 1
    code, out = await asyncio.to_thread(run_cli_with_input, database_url, ["drain", "q"], "y\n")
    assert code == 0
    assert out.endswith("queue q: drained 1 job(s)\n")
    await enqueue(pool, "k", {}, queue="q", delay_ms=3_600_000)
    code, out = await cli(database_url, "obliterate", "q", "--yes")
    assert (code, out.strip()) == (0, "queue q: obliterated (1 job(s) deleted)")
    assert await pool.fetchval("SELECT count(*) FROM job") == 0


async def test_cli_changes_promotes_and_removes_a_job(pool: asyncpg.Pool, database_url: str) -> None:
    job = await enqueue(pool, "k", {"n": 1}, delay_ms=3_600_000)
    code, out = await cli(database_url, "change", str(job.id), "--payload", '{"n": 2}', "--priority", "3")
    assert (code, out.strip()) == (0, f"job {job.id} changed (scheduled)")
    assert await pool.fetchval("SELECT payload FROM job WHERE id = $1", job.id) == {"n": 2}
    code, out = await cli(database_url, "change", str(job.id), "--payload", "[1]")
    assert code == 2
    assert "JSON object" in out
    assert (await cli(database_url, "promote", str(job.id)))[0] == 0
    assert await pool.fetchval("SELECT state FROM job WHERE id = $1", job.id) == "available"
    assert (await cli(database_url, "promote", str(job.id)))[0] == 1
    assert (await cli(database_url, "remove", str(job.id)))[0] == 0
    assert await pool.fetchval("SELECT count(*) FROM job") == 0
