"""The merchant sandbox: a real HTTP webhook receiver that verifies paymanager's signatures and can
misbehave on demand (answer 500, hang, answer 410 Gone, or answer slowly).

`paymanager sandbox merchant --secret whsec_... --mode ok` runs it; tests start it in-process on a
free port (`MerchantReceiver.start`). Every path receives deliveries, and each path can have its own
secrets and mode, so one receiver serves several endpoints. Control routes under `/_control`:

    GET  /_control/received                     every delivery received, oldest first
    POST /_control/paths  {"path", "mode", "secrets", "delay_ms"}   set a path's behaviour
    POST /_control/release                       let every hanging request answer (500)

A delivery is answered 400 when its signature is wrong, stale (`tolerance_sec`) or replayed (the
signature of a delivery already accepted: a captured request sent again); an event id seen before
with a fresh signature is a genuine retry or replay and is accepted (and marked `duplicate`).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from paymanager.sandbox._provider_sim import EXCEPTION_HANDLERS
from paymanager.webhooks import (
    DEFAULT_TOLERANCE_SEC,
    EVENT_ID_HEADER,
    SIGNATURE_HEADER,
    SignatureError,
    parse_header,
    verify,
)

Mode = Literal["ok", "fail", "hang", "gone"]
MODES: tuple[str, ...] = ("ok", "fail", "hang", "gone")
# A hanging request gives up after this long, so a forgotten receiver does not hold sockets forever.
HANG_MAX_S = 600.0
RECEIVED_MAX = 100_000
SEEN_SIGNATURES_MAX = 1_000_000


@dataclass
class PathBehaviour:
    mode: str = "ok"
    secrets: list[str] = field(default_factory=list)
    delay_ms: int = 0


@dataclass(frozen=True)
class Received:
    path: str
    event_id: str | None
    type: str | None
    verified: bool | None
    answered: int
    reason: str | None
    duplicate: bool
    at: float


class MerchantReceiver:
    def __init__(
        self,
        *,
        mode: str = "ok",
        secrets: list[str] | None = None,
        tolerance_sec: int = DEFAULT_TOLERANCE_SEC,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        self.default = PathBehaviour(mode, list(secrets or []))
        self.paths: dict[str, PathBehaviour] = {}
        self.tolerance_sec = tolerance_sec
        self.clock = clock
        self.received: list[Received] = []
        self.hanging = 0
        # The most requests that hung at once: what a slow endpoint cost its sender's concurrency.
        self.hanging_max = 0
        self._release = asyncio.Event()
        self._seen_signatures: set[str] = set()
        self._seen_events: set[tuple[str, str]] = set()
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None
        self.app = Starlette(
            exception_handlers=EXCEPTION_HANDLERS,
            routes=[
                Route("/_control/received", self._list, methods=["GET"]),
                Route("/_control/paths", self._set_path, methods=["POST"]),
                Route("/_control/release", self._release_all, methods=["POST"]),
                Route("/{path:path}", self._receive, methods=["POST"]),
            ],
        )

    def behaviour(self, path: str) -> PathBehaviour:
        return self.paths.get(path, self.default)

    def set_path(
        self, path: str, *, mode: str = "ok", secrets: list[str] | None = None, delay_ms: int = 0
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        self.paths[path] = PathBehaviour(mode, list(secrets or []), delay_ms)

    def release(self) -> None:
        """Let hanging requests answer; later ones hang again until the next release."""
        self._release.set()
        self._release = asyncio.Event()

    def received_on(self, path: str) -> list[Received]:
        return [r for r in self.received if r.path == path]

    def _check(
        self, behaviour: PathBehaviour, body: bytes, header: str | None
    ) -> tuple[bool | None, str | None]:
        if not behaviour.secrets:
            return None, None
        if header is None:
            return False, "missing_header"
        reasons = []
        for secret in behaviour.secrets:
            try:
                verify(body, header, secret, self.tolerance_sec, now=int(self.clock()))
            except SignatureError as exc:
                reasons.append(exc.reason)
                continue
            if parse_header(header)[1][0] in self._seen_signatures:
                return False, "replayed"
            return True, None
        return False, "stale_timestamp" if "stale_timestamp" in reasons else reasons[0]

    async def _receive(self, request: Request) -> Response:
        path = "/" + request.path_params["path"]
        behaviour = self.behaviour(path)
        body = await request.body()
        verified, reason = self._check(behaviour, body, request.headers.get(SIGNATURE_HEADER))
        event_id = request.headers.get(EVENT_ID_HEADER)
        duplicate = event_id is not None and (path, event_id) in self._seen_events
        if verified is False:
            answered = 400
        else:
            answered = await self._answer(behaviour)
            if answered < 300 and event_id is not None:
                self._seen_events.add((path, event_id))
            header = request.headers.get(SIGNATURE_HEADER)
            if answered < 300 and verified and header and len(self._seen_signatures) < SEEN_SIGNATURES_MAX:
                # Only an accepted delivery's signature counts as spent: a retry of a failed attempt
                # signed in the same second carries the same header and must still get through.
                self._seen_signatures.add(parse_header(header)[1][0])
        if len(self.received) < RECEIVED_MAX:
            self.received.append(Received(
                path, event_id, request.headers.get("Paymanager-Event-Type"), verified, answered, reason,
                duplicate, self.clock(),
            ))  # fmt: skip
        return JSONResponse({"received": answered < 300, "reason": reason}, status_code=answered)

    async def _answer(self, behaviour: PathBehaviour) -> int:
        if behaviour.delay_ms:
            await asyncio.sleep(behaviour.delay_ms / 1000)
        if behaviour.mode == "hang":
            self.hanging += 1
            self.hanging_max = max(self.hanging_max, self.hanging)
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._release.wait(), HANG_MAX_S)
            finally:
                self.hanging -= 1
            return 500
        return {"ok": 200, "fail": 500, "gone": 410}[behaviour.mode]

    async def _list(self, _: Request) -> Response:
        return JSONResponse({"received": [asdict(r) for r in self.received], "hanging": self.hanging})

    async def _set_path(self, request: Request) -> Response:
        data: dict[str, Any] = await request.json()
        try:
            self.set_path(
                str(data["path"]), mode=str(data.get("mode", "ok")), secrets=list(data.get("secrets", [])),
                delay_ms=int(data.get("delay_ms", 0)),
            )  # fmt: skip
        except (KeyError, ValueError, TypeError) as exc:
            return JSONResponse({"error": str(exc)}, status_code=422)
        return JSONResponse({"ok": True})

    async def _release_all(self, _: Request) -> Response:
        self.release()
        return JSONResponse({"ok": True})

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve in this event loop on `host:port` (0: a free port); returns the base URL."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(1024)
        sock.setblocking(False)
        bound = sock.getsockname()[1]
        # A receiver that hangs on purpose holds its requests open: shutting down must not wait for them.
        config = uvicorn.Config(
            self.app, log_level="warning", access_log=False, lifespan="off", timeout_graceful_shutdown=1
        )
        self._server = uvicorn.Server(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if self._task.done():
                self._task.result()
            await asyncio.sleep(0.01)
        return f"http://{host}:{bound}"

    async def stop(self) -> None:
        self.release()
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            await self._task


async def serve_forever(
    receiver: MerchantReceiver, host: str, port: int, on_ready: Callable[[str], Awaitable[None]]
) -> None:
    url = await receiver.start(host, port)
    await on_ready(url)
    assert receiver._task is not None
    await receiver._task
