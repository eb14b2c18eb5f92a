"""`paymanager` processes on TigerBeetle: start-up against an unreachable cluster, readiness, the CLI."""

from __future__ import annotations

import httpx

from tests.support.processes import free_port, paymanager_env, run_cli
from tests.support.servers import start_server


def test_start_up_exits_one_naming_the_cluster_when_no_replica_answers(database_url: str) -> None:
    address = f"127.0.0.1:{free_port()},127.0.0.1:{free_port()}"
    env = paymanager_env(
        database_url, WORKER_ROLES="outbox-worker", LEDGER_BACKEND="tigerbeetle", TB_ADDRESS=address,
        LEDGER_CONNECT_ATTEMPTS="2", LEDGER_CONNECT_BACKOFF_MS="10",
    )  # fmt: skip
    result = run_cli(["run"], env)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-2000:]
    assert "connect the ledger" in output
    assert f"TigerBeetle at {address} did not answer after 2 tries" in output


def test_an_api_on_tigerbeetle_is_ready_and_the_cli_reads_its_balances(
    database_url: str, tigerbeetle_address: str
) -> None:
    process, url, env = start_server(
        database_url, "api", LEDGER_BACKEND="tigerbeetle", TB_ADDRESS=tigerbeetle_address
    )
    try:
        ready = httpx.get(f"{url}/readyz", timeout=10)
        assert ready.status_code == 200, ready.text
        assert ready.json()["checks"]["ledger_backend"] == "tigerbeetle"
        balance = run_cli(["ledger", "balance", "system.funding.THB"], env)
        assert balance.returncode == 0, balance.stdout + balance.stderr
        assert "posted" in balance.stdout
        verify = run_cli(["ledger", "verify"], env)
        assert verify.returncode == 1
        assert "TigerBeetle keeps them by itself" in verify.stderr
    finally:
        assert process.terminate() == 0
        process.close()
