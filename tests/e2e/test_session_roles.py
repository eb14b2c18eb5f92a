"""`paymanager run` with checkout sessions: a missing provider stops start-up with exit 2, and the
session-cleanup role runs its worker in headless mode."""

from __future__ import annotations

import pytest

from tests.support.processes import PaymanagerProcess, paymanager_env, run_cli

pytestmark = pytest.mark.slow


def test_sessions_enabled_without_the_gift_card_provider_exit_two(database_url: str) -> None:
    env = paymanager_env(database_url, WORKER_ROLES="outbox-worker", SESSIONS_ENABLED="true")
    env.pop("GIFTCARD_BASE_URL", None)
    result = run_cli(["run"], env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "SESSIONS_ENABLED=true needs GIFTCARD_BASE_URL" in result.stderr


def test_the_session_cleanup_role_starts_its_queue(database_url: str) -> None:
    proc = PaymanagerProcess(paymanager_env(database_url, WORKER_ROLES="session-cleanup"))
    try:
        text = proc.wait_for(lambda out: "started in headless mode" in out and "job worker started" in out)
        worker = next(line for line in text.splitlines() if "job worker started" in line)
        assert '"session-cleanup":1' in worker.replace(" ", ""), worker
        assert proc.terminate() == 0
    finally:
        proc.close()
