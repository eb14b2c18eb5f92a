"""CPU per request of the HTTP clients our adapters could use: httpx and aiohttp, same receiver.

    .venv/bin/python bench/http_client.py [--requests 3000] [--concurrency 64]

The merchant sandbox (`paymanager sandbox merchant`, its own process) answers every POST; this
process sends `--requests` POSTs of a webhook-sized body, `--concurrency` at once over one pooled
client, with each client in turn (twice, interleaved), on uvloop as the workers run. Printed: this
process's CPU milliseconds per request (user + system, from `time.process_time`), a figure the
machine's load moves little, and the rate.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable

import aiohttp
import httpx
import uvloop

BODY = b'{"id": "evt_0123456789abcdef", "type": "intent.settled", "data": {"amount": 1000}}' * 4


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def spawn_receiver(port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "paymanager", "sandbox", "merchant", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip


async def wait_port(port: int) -> None:
    for _ in range(300):
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return
        except OSError:
            await asyncio.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


async def drive(send: Callable[[], Awaitable[int]], requests: int, concurrency: int) -> tuple[float, float]:
    left = requests

    async def one_lane() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            assert await send() == 200

    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(one_lane() for _ in range(concurrency)))
    return 1000 * (time.process_time() - cpu) / requests, requests / (time.perf_counter() - wall)


async def with_httpx(url: str, requests: int, concurrency: int) -> tuple[float, float]:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=10) as client:

        async def send() -> int:
            response = await client.post(url, content=BODY, headers={"Content-Type": "application/json"})
            return response.status_code

        return await drive(send, requests, concurrency)


async def with_aiohttp(url: str, requests: int, concurrency: int) -> tuple[float, float]:
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=10)) as client:

        async def send() -> int:
            async with client.post(url, data=BODY, headers={"Content-Type": "application/json"}) as response:
                await response.read()
                return response.status

        return await drive(send, requests, concurrency)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=3_000)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    port = free_port()
    receiver = spawn_receiver(port)
    try:
        await wait_port(port)
        url = f"http://127.0.0.1:{port}/e0"
        for round_ in (1, 2):
            for name, client in (("httpx", with_httpx), ("aiohttp", with_aiohttp)):
                cpu_ms, rate = await client(url, args.requests, args.concurrency)
                print(f"round {round_} {name:8s} {cpu_ms:6.3f} CPU ms per request  {rate:8.0f} requests/s")
    finally:
        receiver.terminate()
        receiver.wait(timeout=10)


if __name__ == "__main__":
    uvloop.run(main())
