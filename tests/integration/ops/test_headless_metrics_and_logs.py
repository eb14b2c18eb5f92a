"""A headless process serves /metrics and /livez on METRICS_PORT; the ledger's verification shows in
the gauges; the api logs one access line per request without secrets; the KEK warning once."""

from __future__ import annotations

import asyncio

import httpx
import pytest
import structlog
from prometheus_client.parser import text_string_to_metric_families

from paymanager.adapters import secret_box
from paymanager.adapters.secret_box import SecretBox
from tests.integration.payments.conftest import Api
from tests.support.processes import PaymanagerProcess, free_port, paymanager_env, run_cli


def families(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    return {f.name: [(s.labels, s.value) for s in f.samples] for f in text_string_to_metric_families(text)}


@pytest.mark.slow
async def test_a_headless_worker_serves_metrics_and_livez(database_url: str) -> None:
    port = free_port()
    env = paymanager_env(
        database_url, WORKER_ROLES="outbox-worker", METRICS_PORT=str(port), HOST="127.0.0.1",
        METRICS_QUERY_INTERVAL_MS="0",
    )  # fmt: skip
    verified = await asyncio.to_thread(run_cli, ["ledger", "verify"], env)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    process = PaymanagerProcess(env)
    try:
        process.wait_for_line('"started in headless mode"')
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
            live = await http.get("/livez")
            assert (live.status_code, live.json()) == (200, {"status": "ok"})
            scraped = await http.get("/metrics")
            assert scraped.status_code == 200
            assert (await http.get("/nope")).status_code == 404
        found = families(scraped.text)
        assert found["paymanager_ledger_verify_ok"] == [({}, 1.0)]
        assert found["paymanager_ledger_verify_violations"] == [({}, 0.0)]
        assert "paymanager_jobs" in found
        assert "process_cpu_seconds" in found
    finally:
        assert process.terminate() == 0, process.output
        process.close()


async def test_each_request_is_one_access_line_and_one_histogram_sample(api: Api) -> None:
    account = await api.client.open_account()
    with structlog.testing.capture_logs() as logs:
        response = await api.client.get(f"/accounts/{account}")
        assert response.status_code == 200
    lines = [line for line in logs if line.get("event") == "request"]
    assert lines == [
        {
            "event": "request", "log_level": "info", "method": "GET", "route": "/accounts/{account_id}",
            "status": 200, "ms": lines[0]["ms"], "service_id": api.client.service_id,
        }
    ]  # fmt: skip
    assert api.client.secret not in str(logs)
    scraped = families((await api.http.get("/metrics")).text)
    routes = {
        labels["route"]
        for labels, _ in scraped["paymanager_http_request_duration_seconds"]
        if "route" in labels
    }
    assert "/accounts/{account_id}" in routes
    assert not any(account in route for route in routes)


def test_the_development_key_warning_is_written_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(secret_box, "_warned_development_key", False)
    with structlog.testing.capture_logs() as logs:
        SecretBox.from_config(None, warn=False)
        SecretBox.from_config(None)
        SecretBox.from_config(None)
    warnings = [line for line in logs if "development key" in line["event"]]
    assert len(warnings) == 1
