"""A lean open-loop load generator for the API benchmarks, run in a process of its own.

Why not httpx here: on this 2-core machine httpx spent 1.7 ms of CPU per request in the load
generator (measured by `bench/intents.py --loadgen httpx`), more than the api process itself spent
answering it (1.3 ms); the generator then competes with the server for the same two cores and its own
event-loop lag shows up as server latency. This client speaks only what the benchmark needs of
HTTP/1.1 (keep-alive connections, `Content-Length` bodies, no redirects, no chunking, no TLS) and
spends about a tenth of that (it prints its own CPU per request so every run shows it).

    intents_open_loop(...)  create + confirm p2p intents, one pair every 2/rate seconds
"""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from paymanager.api.signing import signed_headers

SCRIPT = str(Path(__file__).resolve())
WARMUP_S = 1.0


class HttpError(Exception):
    pass


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def request(self, head: bytes, body: bytes) -> tuple[int, bytes]:
        self.writer.write(head + body)
        status_line = await self.reader.readline()
        if not status_line:
            raise HttpError("the server closed the connection before answering")
        status = int(status_line.split(b" ", 2)[1])
        length = 0
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.partition(b":")
            lowered = name.strip().lower()
            if lowered == b"content-length":
                length = int(value)
            elif lowered == b"transfer-encoding":
                raise HttpError("chunked responses are not supported by this load generator")
        return status, await self.reader.readexactly(length) if length else b""


class SignedRawClient:
    """Keep-alive connections to one host, each carrying one request at a time, signed per DESIGN §7."""

    def __init__(self, host: str, port: int, service_id: str, secret: str) -> None:
        self.host, self.port = host, port
        self.service_id, self.secret = service_id, secret.encode()
        self._idle: list[_Connection] = []
        self._all: list[_Connection] = []

    async def post(self, target: str, payload: Any = None) -> tuple[int, Any]:
        body = b"" if payload is None else orjson.dumps(payload)
        headers = signed_headers(self.service_id, self.secret, "POST", target, int(time.time()), body)
        headers["Idempotency-Key"] = str(uuid.uuid4())
        if body:
            headers["Content-Type"] = "application/json"
        lines = [f"POST {target} HTTP/1.1", f"Host: {self.host}:{self.port}", f"Content-Length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        head = ("\r\n".join(lines) + "\r\n\r\n").encode()
        while True:
            reused = bool(self._idle)
            conn = self._idle.pop() if reused else await self._open()
            if reused and conn.reader.at_eof():
                self._discard(conn)  # the server closed it while idle (uvicorn: after 5 s)
                continue
            try:
                status, raw = await conn.request(head, body)
            except HttpError:
                self._discard(conn)
                if reused:
                    continue  # closed by the server as we sent: nothing was answered, send again
                raise
            except BaseException:
                self._discard(conn)
                raise
            self._idle.append(conn)
            return status, orjson.loads(raw) if raw else None

    def _discard(self, conn: _Connection) -> None:
        conn.writer.close()
        self._all.remove(conn)

    async def _open(self) -> _Connection:
        reader, writer = await asyncio.open_connection(self.host, self.port)
        conn = _Connection(reader, writer)
        self._all.append(conn)
        return conn

    async def close(self) -> None:
        for conn in self._all:
            conn.writer.close()
        self._all.clear()
        self._idle.clear()


async def open_loop(one: Callable[[int], Coroutine[Any, Any, None]], count: int, per_second: float) -> float:
    """Start `one(0)` ... `one(count - 1)` on schedule, `per_second` of them a second, whatever the
    earlier ones are doing (an open loop: a slow server does not slow the arrivals); the seconds
    taken to send them all and see them finish."""
    start = time.perf_counter()
    tasks = []
    for i in range(count):
        delay = start + i / per_second - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i)))
    await asyncio.gather(*tasks)
    return time.perf_counter() - start


@dataclass(frozen=True)
class OpenLoopResult:
    rate: int
    achieved: float  # requests/s actually sent while sending
    p50_ms: float
    p99_ms: float
    errors: int
    intents: int  # intents created and confirmed
    generator_cpu_ms: float  # this generator's own CPU per request
    seconds: float
    warmup_intents: int  # created and confirmed during the warm-up, before the figures


async def _intents_open_loop(
    ports: list[int], service_id: str, secret: str, pairs: list[tuple[str, str]], rate: int, seconds: float
) -> OpenLoopResult:
    # Several api processes: intent i goes to ports[i % len(ports)], as a round-robin balancer would.
    clients = [SignedRawClient("127.0.0.1", port, service_id, secret) for port in ports]
    latencies: list[float] = []
    errors = 0
    done = 0
    tag = uuid.uuid4().hex[:8]  # runs at the same rate differ in body, hence in signature
    phase = "warm-up"  # and the warm-up's bodies from the measured ones

    async def one(i: int) -> None:
        nonlocal errors, done
        payer, payee = pairs[i % len(pairs)]
        client = clients[i % len(clients)]
        body = {"channel": "internal-p2p", "amount": 100, "currency": "THB", "payer_account_id": payer,
                "payee_account_id": payee, "description": f"bench {rate} {phase} {i} {tag}"}  # fmt: skip
        try:
            t0 = time.perf_counter()
            status, created = await client.post("/intents", body)
            latencies.append(time.perf_counter() - t0)
            if status != 201:
                errors += 1
                return
            t1 = time.perf_counter()
            status, _ = await client.post(f"/intents/{created['id']}/confirm")
            latencies.append(time.perf_counter() - t1)
            if status == 200:
                done += 1
            else:
                errors += 1
        except (OSError, HttpError, asyncio.IncompleteReadError):
            errors += 1

    # Warm-up at the same rate, not recorded: the generator opens its connections and the api grows
    # its pool and prepares its statements on the new connections (a cold start costs 100-500 ms).
    await open_loop(one, int(rate / 2 * WARMUP_S), rate / 2)
    warmup_intents = done
    latencies.clear()
    errors = done = 0
    phase = "measured"
    cpu = time.process_time()
    sending = await open_loop(one, int(rate / 2 * seconds), rate / 2)
    cpu_ms = (time.process_time() - cpu) * 1000 / max(len(latencies), 1)
    for client in clients:
        await client.close()
    latencies.sort()
    p50 = statistics.median(latencies) * 1000 if latencies else float("nan")
    p99 = latencies[max(int(len(latencies) * 0.99) - 1, 0)] * 1000 if latencies else float("nan")
    return OpenLoopResult(
        rate, len(latencies) / sending, p50, p99, errors, done, cpu_ms, sending, warmup_intents
    )


async def intents_open_loop(
    ports: int | list[int],
    service_id: str,
    secret: str,
    pairs: list[tuple[str, str]],
    rate: int,
    seconds: float,
) -> OpenLoopResult:
    """Run the open loop in a process of its own (`python bench/http_load.py`, arguments as JSON on
    stdin, the result as JSON on stdout), so it shares no event loop and no core time with the caller."""
    ports = [ports] if isinstance(ports, int) else ports
    args = {"ports": ports, "service_id": service_id, "secret": secret, "pairs": pairs, "rate": rate,
            "seconds": seconds}  # fmt: skip
    child = await asyncio.create_subprocess_exec(
        sys.executable, SCRIPT, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, _ = await child.communicate(orjson.dumps(args))
    if child.returncode != 0:
        raise RuntimeError(f"the load generator exited with {child.returncode}")
    return OpenLoopResult(**orjson.loads(out))


def main() -> None:
    args = orjson.loads(sys.stdin.buffer.read())
    args["pairs"] = [tuple(pair) for pair in args["pairs"]]
    try:
        import uvloop

        result = uvloop.run(_intents_open_loop(**args))
    except ImportError:
        result = asyncio.run(_intents_open_loop(**args))
    sys.stdout.buffer.write(orjson.dumps(dataclasses.asdict(result)))


if __name__ == "__main__":
    main()
