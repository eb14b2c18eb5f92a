"""The demo of `make run` moves money through a real server and the ledger invariant holds."""

from __future__ import annotations

import pytest

from tests.support.processes import PaymanagerProcess, free_port, paymanager_env, run_cli

pytestmark = pytest.mark.slow


def test_demo_settles_every_intent_through_a_running_server(database_url: str) -> None:
    port = free_port()
    env = paymanager_env(database_url, WORKER_ROLES="api,outbox-worker", PORT=str(port), HOST="127.0.0.1")
    server = PaymanagerProcess(env)
    try:
        server.wait_for_line('"listening"')
        result = run_cli(
            ["demo", "--url", f"http://127.0.0.1:{port}", "--accounts", "4", "--intents", "25"],
            env,
            timeout_s=120,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert "25 intents settled, 0 not settled" in result.stdout
        verify = run_cli(["ledger", "verify"], env)
        assert verify.returncode == 0, verify.stdout + verify.stderr
    finally:
        assert server.terminate() == 0
        server.close()


def test_run_with_demo_shows_the_progress_and_keeps_serving(database_url: str) -> None:
    port = free_port()
    env = paymanager_env(database_url, WORKER_ROLES="all", PORT=str(port), HOST="127.0.0.1")
    server = PaymanagerProcess(env, ["run", "--demo", "--demo-intents", "20"])
    try:
        text = server.wait_for_line("paymanager keeps running", timeout_s=120)
        assert "20 intents settled, 0 not settled" in text
        assert "Ledger invariant (sum of debits = sum of credits): holds" in text
        assert server.proc.poll() is None
    finally:
        assert server.terminate() == 0
        server.close()
