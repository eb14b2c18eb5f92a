"""CPU per request of a session provider's sandbox, and of the driver calling it.

Run: `.venv/bin/python bench/sandbox_cost.py [--requests 2000] [--kind card]`. Starts
`paymanager sandbox KIND` in its own process, warms one driver connection up, then sends
`--requests` sequential authorisations (card) or balance reads (giftcard) through the real driver
and prints the CPU milliseconds per request of the sandbox process and of this process. Sequential
on one connection: what is measured is the cost of a request, not of concurrency.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.processes import free_port  # noqa: E402

from paymanager.adapters.card.acquirer import HttpCardAcquirer  # noqa: E402
from paymanager.adapters.giftcard.titreo import TitreoGiftCards  # noqa: E402

WARM_UP = 300


def start(kind: str, port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "paymanager", "sandbox", kind, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}/_sandbox/faults", timeout=1)
            return proc
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                proc.terminate()
                raise RuntimeError(f"the {kind} sandbox did not start") from None
            time.sleep(0.1)


def cpu_s(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


async def measure(kind: str, port: int, pid: int, requests: int) -> tuple[float, float]:
    url = f"http://127.0.0.1:{port}"
    if kind == "card":
        card = HttpCardAcquirer(url, api_key=None, timeout_ms=5_000)

        async def call(i: int) -> None:
            await card.authorize(token="tok", amount=1, currency="THB", idempotency_key=f"k{i}")

        close = card.close
    else:
        gift = TitreoGiftCards(url, api_key=None, timeout_ms=5_000)

        async def call(i: int) -> None:
            await gift.balance(f"GC{i}")

        close = gift.close
    for i in range(WARM_UP):
        await call(-i - 1)
    server, client = cpu_s(pid), time.process_time()
    for i in range(requests):
        await call(i)
    server_ms = 1000 * (cpu_s(pid) - server) / requests
    client_ms = 1000 * (time.process_time() - client) / requests
    await close()
    return server_ms, client_ms


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2_000)
    parser.add_argument("--kind", choices=["card", "giftcard"], default="card")
    args = parser.parse_args()
    port = free_port()
    proc = start(args.kind, port)
    try:
        server_ms, client_ms = asyncio.run(measure(args.kind, port, proc.pid, args.requests))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    print(
        f"{args.kind} sandbox: {server_ms:.2f} ms CPU per request; driver {client_ms:.2f} ms;"
        f" load {psutil.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
