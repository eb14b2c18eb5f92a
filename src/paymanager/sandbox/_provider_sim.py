"""What the session providers' sandboxes share: fault injection, submission counters, serving.

Faults are set through the admin route `POST /_sandbox/faults` (any subset of the fields of
`Faults`) and read back with `GET`; counters per card or authorisation through
`GET /_sandbox/counters`; `POST /_sandbox/reset` forgets everything. The faults are the ones real
rails show (docs: research/psp-dialects.md): slow answers with a spread, a 5xx before anything was
done (safe to retry with the same key), a decline, and the ambiguous one: accepted, then no answer.
"""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

# Bounds of the admin settings, so a typo cannot hang a sandbox for a day.
LATENCY_MS_MAX = 60_000
HANG_MS_MAX = 300_000
# How long an idle client connection is kept open: longer than the drivers keep theirs idle
# (aiohttp's 15 s), so the client closes first. uvicorn's default (5 s) closes connections a quiet
# worker keeps pooled, so each request after a pause would pay a new TCP connection on both sides,
# and a server that closes first races a request already sent on that connection.
KEEP_ALIVE_S = 75


@dataclass
class Faults:
    latency_ms: int = 0
    # A uniform extra in [0, latency_jitter_ms]: a distribution, not a constant.
    latency_jitter_ms: int = 0
    # The share of money-moving requests answered 503 before anything is done.
    error_rate: float = 0.0
    # The next N money-moving requests answer 503 before anything is done (deterministic).
    fail_next: int = 0
    # Debits / authorisations of these cards answer 503 before anything is done, until changed.
    fail_cards: list[str] = field(default_factory=list)
    # Every debit / authorisation is declined, or only those of these cards.
    decline: bool = False
    decline_cards: list[str] = field(default_factory=list)
    # The share of requests applied and then left without an answer for hang_ms (the client times out).
    accept_then_timeout_rate: float = 0.0
    # The next N requests are applied and then left without an answer (deterministic).
    accept_then_timeout_next: int = 0
    hang_ms: int = 30_000

    def update(self, changes: dict[str, Any]) -> None:
        for name, value in changes.items():
            if name not in self.__dataclass_fields__:
                raise ValueError(f"unknown fault {name!r}")
            setattr(self, name, value)
        if not 0 <= self.latency_ms <= LATENCY_MS_MAX or not 0 <= self.latency_jitter_ms <= LATENCY_MS_MAX:
            raise ValueError(f"latency must be within [0, {LATENCY_MS_MAX}] ms")
        if not 0 <= self.hang_ms <= HANG_MS_MAX:
            raise ValueError(f"hang_ms must be within [0, {HANG_MS_MAX}]")
        if not 0 <= self.error_rate <= 1 or not 0 <= self.accept_then_timeout_rate <= 1:
            raise ValueError("rates must be within [0, 1]")


class ProviderSim:
    """Faults and counters of one sandbox, and the admin routes that set and read them."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self.faults = Faults()
        self.counters: defaultdict[str, defaultdict[str, int]] = defaultdict(lambda: defaultdict(int))
        self._rng = rng or random.Random()

    def count(self, key: str, counter: str) -> None:
        self.counters[key][counter] += 1

    async def delay(self) -> None:
        faults = self.faults
        extra = self._rng.randint(0, faults.latency_jitter_ms) if faults.latency_jitter_ms else 0
        if faults.latency_ms or extra:
            await asyncio.sleep((faults.latency_ms + extra) / 1000)

    def should_fail(self, card: str | None = None) -> bool:
        """A 5xx before anything is done: a card of `fail_cards`, one `fail_next`, or `error_rate`."""
        if card is not None and card in self.faults.fail_cards:
            return True
        if self.faults.fail_next > 0:
            self.faults.fail_next -= 1
            return True
        return self.faults.error_rate > 0 and self._rng.random() < self.faults.error_rate

    def declines(self, card: str) -> bool:
        return self.faults.decline or card in self.faults.decline_cards

    async def answer_or_hang(self, response: JSONResponse) -> JSONResponse:
        """After the effect is applied: the answer, or (a fault) none within the client's patience."""
        hang = self.faults.accept_then_timeout_next > 0
        if hang:
            self.faults.accept_then_timeout_next -= 1
        elif self.faults.accept_then_timeout_rate > 0:
            hang = self._rng.random() < self.faults.accept_then_timeout_rate
        if hang:
            await asyncio.sleep(self.faults.hang_ms / 1000)
        return response

    def reset(self) -> None:
        self.faults = Faults()
        self.counters.clear()

    def admin_routes(self, reset_state: Any) -> list[Route]:
        """The routes that set and read the faults and counters (`reset_state` forgets the rest)."""

        async def get_faults(request: Request) -> JSONResponse:
            return JSONResponse(asdict(self.faults))

        async def set_faults(request: Request) -> JSONResponse:
            try:
                changes = await request.json()
                if not isinstance(changes, dict):
                    raise ValueError("the body must be a JSON object of faults")
                self.faults.update(changes)
            except (ValueError, TypeError) as exc:
                return JSONResponse({"error": "bad_faults", "message": str(exc)}, status_code=400)
            return JSONResponse(asdict(self.faults))

        async def get_counters(request: Request) -> JSONResponse:
            return JSONResponse({key: dict(values) for key, values in self.counters.items()})

        async def reset(request: Request) -> JSONResponse:
            self.reset()
            reset_state()
            return JSONResponse({"status": "reset"})

        return [
            Route("/_sandbox/faults", get_faults, methods=["GET"]),
            Route("/_sandbox/faults", set_faults, methods=["POST"]),
            Route("/_sandbox/counters", get_counters, methods=["GET"]),
            Route("/_sandbox/reset", reset, methods=["POST"]),
        ]


async def _client_gone(request: Request, exc: Exception) -> Response:
    # The client hung up before its body arrived (a worker killed mid-request): nothing was read, so
    # nothing was applied or counted, and no one is left to answer. Without this, each such request
    # would print an "Exception in ASGI application" traceback, as if the sandbox had failed.
    return Response(status_code=400)


# The exception handlers of every sandbox app.
EXCEPTION_HANDLERS: dict[Any, Any] = {ClientDisconnect: _client_gone}


def unavailable() -> JSONResponse:
    return JSONResponse({"error": "unavailable", "message": "injected fault"}, status_code=503)


def serve(app: Starlette, host: str, port: int) -> None:
    """Serve a sandbox until interrupted (the `paymanager sandbox ...` commands)."""
    import uvicorn

    uvicorn.run(
        app, host=host, port=port, log_level="warning", access_log=False, timeout_keep_alive=KEEP_ALIVE_S
    )
