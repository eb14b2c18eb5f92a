"""A client that hangs up before its request's body arrived (a worker killed mid-request, as the chaos
runs do): each sandbox ends the request quietly, applies and counts nothing, and raises nothing, so
no traceback stands in the log for a failure of the sandbox."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

import pytest
from starlette.applications import Starlette

from paymanager.sandbox import card, giftcard, psp
from paymanager.sandbox._provider_sim import ProviderSim
from paymanager.sandbox.merchant import MerchantReceiver


async def _send_and_hang_up(app: Starlette, path: str, headers: list[tuple[bytes, bytes]]) -> list[Any]:
    """Run one POST whose client disconnects before any body: what the app sent back."""
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"content-length", b"64"), *headers],
        "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 80), "root_path": "",
    }  # fmt: skip
    sent: list[Any] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


async def test_the_psp_sandbox_counts_no_submission_of_a_client_that_hung_up() -> None:
    state = psp.SandboxState(seed=1)
    app = psp.create_app(state)
    auth = [(b"authorization", f"Bearer {state.api_key}".encode())]
    for path in ("/ipps/v1/transfers", "/ipps/v1/account-inquiry", "/qp/api/payouts", "/wise/v1/transfers"):
        await _send_and_hang_up(app, path, auth)
    assert state.submissions == {}
    assert state.transfers == {}


@pytest.mark.parametrize(
    ("module", "path"),
    [(giftcard, "/v1/debits"), (card, "/v1/authorizations")],
    ids=["giftcard", "card"],
)
async def test_a_provider_sandbox_counts_nothing_of_a_client_that_hung_up(module: Any, path: str) -> None:
    sim = ProviderSim()
    app = module.create_app(sim)
    await _send_and_hang_up(app, path, [(b"idempotency-key", b"leg-1")])
    assert dict(sim.counters) == {}


async def test_the_merchant_sandbox_receives_nothing_of_a_client_that_hung_up() -> None:
    receiver = MerchantReceiver()
    await _send_and_hang_up(receiver.app, "/hooks", [])
    assert receiver.received == []
