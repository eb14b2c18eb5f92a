"""The session providers' sandboxes served over real HTTP from a thread of the test process, and an
async client of their admin routes (faults, counters, cards)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette

from paymanager.sandbox import card, giftcard
from paymanager.sandbox._provider_sim import KEEP_ALIVE_S
from tests.support.processes import free_port


class SandboxAdmin:
    """The admin side of one sandbox, at `url`."""

    def __init__(self, url: str) -> None:
        self.url = url

    async def _call(self, method: str, path: str, payload: Any = None) -> Any:
        async with httpx.AsyncClient(base_url=self.url, timeout=10) as http:
            response = await http.request(method, path, json=payload)
        assert response.status_code < 300, response.text
        return response.json()

    async def faults(self, **changes: Any) -> dict[str, Any]:
        result: dict[str, Any] = await self._call("POST", "/_sandbox/faults", changes)
        return result

    async def counters(self) -> dict[str, dict[str, int]]:
        result: dict[str, dict[str, int]] = await self._call("GET", "/_sandbox/counters")
        return result

    async def counter(self, key: str, name: str) -> int:
        return (await self.counters()).get(key, {}).get(name, 0)

    async def cards(self, *cards: tuple[str, int], currency: str = "THB") -> None:
        await self._call(
            "POST",
            "/_sandbox/cards",
            {"cards": [{"card": c, "balance": b, "currency": currency} for c, b in cards]},
        )

    async def balance(self, number: str) -> int:
        return int((await self._call("GET", f"/_sandbox/cards/{number}"))["balance"])

    async def authorization(self, key: str) -> dict[str, Any]:
        result: dict[str, Any] = await self._call("GET", f"/_sandbox/authorizations/{key}")
        return result


@contextmanager
def serving(app: Starlette) -> Iterator[SandboxAdmin]:
    """`app` on a free port of 127.0.0.1 in a thread, until the block ends."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=port,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=1,
            timeout_keep_alive=KEEP_ALIVE_S,
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        assert thread.is_alive(), "the sandbox did not start"
        assert time.monotonic() < deadline, "the sandbox did not start within 15 s"
        time.sleep(0.01)
    try:
        yield SandboxAdmin(f"http://127.0.0.1:{port}")
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@contextmanager
def giftcard_sandbox() -> Iterator[SandboxAdmin]:
    with serving(giftcard.create_app()) as admin:
        yield admin


@contextmanager
def card_sandbox() -> Iterator[SandboxAdmin]:
    with serving(card.create_app()) as admin:
        yield admin
