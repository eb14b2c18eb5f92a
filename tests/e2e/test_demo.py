"""The demo of `make run` moves money through a real server and the ledger invariant holds."""

from __future__ import annotations

import base64
import os

import asyncpg
import pytest

from paymanager.adapters.secret_box import Sealed, SecretBox
from tests.support.databases import run_sync
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
    env = paymanager_env(
        database_url, WORKER_ROLES="all", PSP_NAMES="ipps,qp,wise", PORT=str(port), HOST="127.0.0.1"
    )
    server = PaymanagerProcess(env, ["run", "--demo", "--demo-intents", "20"])
    try:
        text = server.wait_for_line("paymanager keeps running", timeout_s=120)
        assert "20 intents settled, 0 not settled" in text
        words = " ".join(text.split())  # the console wraps long lines
        assert "21 payouts settled through the sandbox PSPs, 0 not settled" in words
        assert "(psp-worker, ipps, qp, wise over HTTP)" in words
        assert "Ledger invariant (sum of debits = sum of credits): holds" in text
        assert server.proc.poll() is None
    finally:
        assert server.terminate() == 0
        server.close()


def test_the_demo_at_debug_level_logs_no_secret_key_or_signature(database_url: str) -> None:
    kek = base64.b64encode(os.urandom(32)).decode()
    port = free_port()
    env = paymanager_env(
        database_url,
        WORKER_ROLES="all",
        PORT=str(port),
        HOST="127.0.0.1",
        LOG_LEVEL="debug",
        PSP_CONFIG_KEK=kek,
    )
    server = PaymanagerProcess(env, ["run", "--demo", "--demo-intents", "20"])
    try:
        server.wait_for_line("paymanager keeps running", timeout_s=120)
        extra = run_cli(
            ["demo", "--url", f"http://127.0.0.1:{port}", "--accounts", "2", "--intents", "5"], env
        )
        assert extra.returncode == 0, extra.stdout + extra.stderr
        secrets = run_sync(_service_secrets(database_url, kek))
    finally:
        assert server.terminate() == 0
        logs = server.output + extra.stdout + extra.stderr
        server.close()
    assert len(secrets) >= 4  # two services for each demo run
    leaked = [name for name, value in [("PSP_CONFIG_KEK", kek), *secrets] if value in logs]
    assert not leaked, leaked
    assert "sk_" not in logs
    assert "x-signature" not in logs.lower()
    assert "x-nonce" not in logs.lower()


async def _service_secrets(database_url: str, kek: str) -> list[tuple[str, str]]:
    box = SecretBox.from_config(kek)
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch("SELECT id, secret_key_id, secret_ciphertext FROM service")
    finally:
        await conn.close()
    return [
        (
            row["id"],
            box.open(Sealed(row["secret_key_id"], row["secret_ciphertext"]), row["id"].encode())
            .reveal()
            .decode(),
        )
        for row in rows
    ]
