"""docs/JOBS.md's quickstart runs as pasted (a program on `paymanager.jobs` alone)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import asyncpg

from paymanager.db import migrations
from tests.support.databases import DatabaseFactory

JOBS_MD = Path(__file__).resolve().parents[3] / "docs" / "JOBS.md"


def quickstart() -> str:
    blocks = re.findall(r"```python\n(.*?)```", JOBS_MD.read_text(), flags=re.S)
    assert len(blocks) == 1
    return str(blocks[0])


async def test_the_quickstart_runs_as_pasted(pool: asyncpg.Pool, database_url: str, tmp_path: Path) -> None:
    program = tmp_path / "quickstart.py"
    program.write_text(quickstart())
    env = {**os.environ, "DATABASE_URL": database_url}
    result = await asyncio.to_thread(
        subprocess.run, [sys.executable, str(program)], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "completed {'sent_to': 'a@example.com'}" in result.stdout
    assert "report completed" in result.stdout
    report = await pool.fetchrow("SELECT state, logs FROM job WHERE kind = 'report.build'")
    assert report is not None
    assert report["state"] == "completed"
    assert await pool.fetchval("SELECT count(*) FROM job WHERE kind = 'email.send'") == 3


def _paymanager(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "paymanager", *args], env=env, cwd=cwd, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip


async def test_the_engine_schema_migrates_alone_and_runs_the_quickstart(
    database_factory: DatabaseFactory, tmp_path: Path
) -> None:
    url = await database_factory.create_empty()
    env = {**os.environ, "DATABASE_URL": url}
    first = await asyncio.to_thread(_paymanager, ["jobs", "migrate"], env, tmp_path)
    assert first.returncode == 0, first.stderr
    assert "0100_jobs" in first.stdout
    again = await asyncio.to_thread(_paymanager, ["jobs", "migrate"], env, tmp_path)
    assert again.returncode == 0, again.stderr
    assert "the job engine's schema is current" in again.stdout

    program = tmp_path / "quickstart.py"
    program.write_text(quickstart())
    result = await asyncio.to_thread(
        subprocess.run, [sys.executable, str(program)], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "report completed" in result.stdout

    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        tables = {r["tablename"] for r in rows}
        versions = [
            r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations ORDER BY 1")
        ]
        jobs_done = await conn.fetchval("SELECT count(*) FROM job WHERE state = 'completed'")
    finally:
        await conn.close()
    engine_versions = [
        m.version for m in migrations.available_migrations() if m.version in migrations.JOB_ENGINE_VERSIONS
    ]
    assert versions == engine_versions
    assert tables == {"schema_migrations"} | {t for t in tables if t.startswith("job")}
    assert {"job", "job_queue", "job_dedup"} <= tables
    assert not {"ledger_account", "ledger_transfer", "intent", "process"} & tables
    assert jobs_done == 4
