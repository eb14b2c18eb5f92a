"""docs/JOBS.md's quickstart runs as pasted (a program on `paymanager.jobs` alone)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import asyncpg

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
