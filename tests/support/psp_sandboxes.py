"""The PSP sandbox (paymanager.sandbox.psp) served over real HTTP from a thread of the test process,
and a client for its admin routes."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import uvicorn

from paymanager.sandbox.psp import SandboxState, config_for, create_app
from tests.support.processes import free_port


@dataclass
class Sandbox:
    url: str
    state: SandboxState

    def config(self, dialect: str, **extra: Any) -> bytes:
        """The PSP configuration file's bytes that point `dialect`'s driver here."""
        return json.dumps(config_for(dialect, self.url, self.state, **extra)).encode()

    def faults(self, **faults: Any) -> None:
        response = httpx.post(f"{self.url}/admin/faults", json=faults)
        response.raise_for_status()

    def reset(self) -> None:
        httpx.post(f"{self.url}/admin/reset").raise_for_status()

    def submissions(self) -> dict[str, int]:
        response = httpx.get(f"{self.url}/admin/submissions")
        response.raise_for_status()
        result: dict[str, int] = response.json()
        return result

    def transfers(self) -> dict[str, dict[str, Any]]:
        """The transfers the sandbox holds, as `{"<dialect>:<reference>": {status, amount}}`."""
        response = httpx.get(f"{self.url}/admin/transfers")
        response.raise_for_status()
        result: dict[str, dict[str, Any]] = response.json()
        return result

    def webhook(self, dialect: str, reference: str, **spec: Any) -> tuple[dict[str, str], bytes]:
        response = httpx.post(
            f"{self.url}/admin/webhook", json={"dialect": dialect, "reference": reference, **spec}
        )
        response.raise_for_status()
        data = response.json()
        return data["headers"], data["body"].encode()


class _Server(uvicorn.Server):
    def install_signal_handlers(self) -> None:  # the test process owns its signals
        pass


def serve_sandbox(state: SandboxState | None = None) -> Iterator[Sandbox]:
    state = state or SandboxState(seed=7)
    port = free_port()
    config = uvicorn.Config(create_app(state), host="127.0.0.1", port=port, log_level="warning",
                            access_log=False, lifespan="off", timeout_graceful_shutdown=1)  # fmt: skip
    server = _Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    for _ in range(1_000):  # a correctness bound: a sandbox that never listens fails the test
        if server.started:
            break
        time.sleep(0.01)
    assert server.started, "the PSP sandbox did not start"
    try:
        yield Sandbox(f"http://127.0.0.1:{port}", state)
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def psp_sandbox_server() -> Iterator[Sandbox]:
    yield from serve_sandbox()


@pytest.fixture
def psp_sandbox(psp_sandbox_server: Sandbox) -> Iterator[Sandbox]:
    """The module's sandbox, with no faults and no transfers at the start of each test."""
    psp_sandbox_server.reset()
    yield psp_sandbox_server
    psp_sandbox_server.reset()
