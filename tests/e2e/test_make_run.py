"""The `make run` path: no DATABASE_URL, an empty data directory, migrations, every role, /readyz."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from tests.support.processes import PaymanagerProcess, free_port

pytestmark = pytest.mark.slow


def test_embedded_postgres_starts_from_empty_dir_and_serves_readyz(tmp_path: Path) -> None:
    port = free_port()
    data_dir = tmp_path / "state" / "pg"
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL" and not k.startswith("PYTEST_")}
    env.update(
        WORKER_ROLES="all", PORT=str(port), HOST="127.0.0.1", EMBEDDED_PG_DIR=str(data_dir), LOG_FORMAT="json"
    )
    # As `make run`: every role, so the psp-worker's PSP is served by the sandbox in the process.
    proc = PaymanagerProcess(env, ["run", "--migrate", "--sandbox-psp"])
    try:
        proc.wait_for_line('"listening"', timeout_s=120)
        assert (data_dir / "PG_VERSION").exists()
        ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10)
        assert ready.status_code == 200, ready.text
        assert ready.json()["checks"]["schema"] == "current"
        assert proc.terminate(timeout_s=60) == 0
    finally:
        proc.close()
