"""Real `paymanager` processes for end-to-end and chaos tests."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

# Ports for servers the tests start, below Linux's ephemeral range (32768-60999 by default). A port
# the kernel hands out for port 0 is an ephemeral one, so between our check and the server's bind an
# outgoing connection (to PostgreSQL, Redis, a sandbox) of any test worker could take it: that race
# failed a run with "Address already in use". Outgoing connections never take a port from this range.
TEST_PORTS = range(20_000, 32_000)


def free_port() -> int:
    """A port no one listens on now, outside the ephemeral range, picked at random so that parallel
    test workers rarely try the same one (and skip it if another took it)."""
    rng = random.SystemRandom()
    for _ in range(100):
        port = rng.choice(TEST_PORTS)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {TEST_PORTS}")


def paymanager_env(database_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(
        DATABASE_URL=database_url,
        LOG_FORMAT="json",
        PROCESS_HEARTBEAT_INTERVAL_MS="200",
        PROCESS_HEARTBEAT_STALE_MS="2000",
        # Small pools: a CI run starts many processes at once on one server (max_connections 100).
        DB_POOL_MIN_SIZE="1",
        DB_POOL_MAX_SIZE="6",
        # Many headless processes share this host in a test run: no metrics port unless a test asks.
        METRICS_PORT="0",
    )
    env.update(extra)
    return env


class PaymanagerProcess:
    """A `python -m paymanager run` subprocess whose output is collected for assertions."""

    def __init__(self, env: dict[str, str], args: list[str] | None = None) -> None:
        self._log = tempfile.NamedTemporaryFile(prefix="pm-proc-", suffix=".log", delete=False)  # noqa: SIM115
        self.log_path = Path(self._log.name)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "paymanager", *(args or ["run"])],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, predicate: Callable[[str], bool], timeout_s: float = 30) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            text = self.output
            if predicate(text):
                return text
            if self.proc.poll() is not None:
                raise AssertionError(f"process exited {self.proc.returncode} early:\n{text}")
            time.sleep(0.05)
        raise AssertionError(f"timed out after {timeout_s}s waiting; output:\n{self.output}")

    def wait_for_line(self, needle: str, timeout_s: float = 30) -> str:
        return self.wait_for(lambda text: needle in text, timeout_s)

    def terminate(self, timeout_s: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout_s)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)

    def close(self) -> None:
        self.kill()
        self._log.close()
        self.log_path.unlink(missing_ok=True)


def run_cli(args: list[str], env: dict[str, str], timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "paymanager", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def in_thread(target: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread
