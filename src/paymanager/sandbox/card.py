"""The card acquirer's sandbox: authorisations (holds), captures and releases over HTTP, with faults.

`paymanager sandbox card --port P` serves it; the dialect is documented in
`paymanager.adapters.card.acquirer`. Any token is a card with unlimited funds unless a fault
declines it. Counters per authorisation key: authorize_submissions, authorizations_applied,
capture_submissions, captures_applied, release_submissions, releases_applied.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from paymanager.sandbox._provider_sim import EXCEPTION_HANDLERS, ProviderSim, unavailable


@dataclass
class Authorization:
    key: str
    token: str
    amount: int
    currency: str
    # authorized, captured, released (found=False: released before it arrived, a tombstone).
    status: str
    found: bool = True


class CardState:
    def __init__(self) -> None:
        self.authorizations: dict[str, Authorization] = {}

    def reset(self) -> None:
        self.authorizations.clear()


def _body(auth: Authorization) -> dict[str, object]:
    return {
        "authorization_id": auth.key,
        "status": auth.status,
        "amount": auth.amount,
        "currency": auth.currency,
    }


def create_app(sim: ProviderSim | None = None) -> Starlette:
    sim = sim or ProviderSim()
    state = CardState()

    async def get_authorization(request: Request) -> JSONResponse:
        key = request.path_params["key"]
        found = state.authorizations.get(key)
        if found is None:
            return JSONResponse({"error": "not_found"}, status_code=404)
        return JSONResponse(_body(found))

    async def authorize(request: Request) -> JSONResponse:
        body = await request.json()
        idempotency_key = request.headers.get("idempotency-key")
        if not idempotency_key:
            return JSONResponse({"error": "idempotency_key_required"}, status_code=400)
        token = str(body.get("token", ""))
        sim.count(idempotency_key, "authorize_submissions")
        await sim.delay()
        if sim.should_fail(token):
            return unavailable()
        seen = state.authorizations.get(idempotency_key)
        if seen is not None:
            if not seen.found:
                return JSONResponse({"error": "authorization_released", **_body(seen)}, status_code=409)
            return await sim.answer_or_hang(JSONResponse(_body(seen), status_code=200))
        amount = int(body.get("amount", 0))
        if amount <= 0 or not token:
            return JSONResponse({"error": "bad_request", "message": "token and amount"}, status_code=400)
        if sim.declines(token):
            return JSONResponse({"error": "declined", "message": "do not honour"}, status_code=402)
        made = Authorization(idempotency_key, token, amount, str(body.get("currency", "")), "authorized")
        state.authorizations[idempotency_key] = made
        sim.count(idempotency_key, "authorizations_applied")
        return await sim.answer_or_hang(JSONResponse(_body(made), status_code=201))

    async def capture(request: Request) -> JSONResponse:
        key = request.path_params["key"]
        sim.count(key, "capture_submissions")
        await sim.delay()
        if sim.should_fail():
            return unavailable()
        seen = state.authorizations.get(key)
        if seen is None:
            return JSONResponse({"error": "not_found"}, status_code=404)
        if seen.status == "released":
            return JSONResponse({"error": "authorization_released", **_body(seen)}, status_code=409)
        if seen.status == "authorized":
            seen.status = "captured"
            sim.count(key, "captures_applied")
        return await sim.answer_or_hang(JSONResponse(_body(seen)))

    async def release(request: Request) -> JSONResponse:
        key = request.path_params["key"]
        sim.count(key, "release_submissions")
        await sim.delay()
        if sim.should_fail():
            return unavailable()
        seen = state.authorizations.get(key)
        if seen is None:
            state.authorizations[key] = Authorization(key, "", 0, "", "released", found=False)
            return await sim.answer_or_hang(JSONResponse({"status": "released", "found": False}))
        if seen.status == "captured":
            return JSONResponse({"error": "already_captured", **_body(seen)}, status_code=409)
        if seen.status == "authorized":
            seen.status = "released"
            sim.count(key, "releases_applied")
        return await sim.answer_or_hang(JSONResponse({**_body(seen), "found": seen.found}))

    app = Starlette(
        exception_handlers=EXCEPTION_HANDLERS,
        routes=[
            *sim.admin_routes(state.reset),
            Route("/_sandbox/authorizations/{key}", get_authorization, methods=["GET"]),
            Route("/v1/authorizations", authorize, methods=["POST"]),
            Route("/v1/authorizations/{key}/capture", capture, methods=["POST"]),
            Route("/v1/authorizations/{key}/release", release, methods=["POST"]),
        ],
    )
    app.state.sim = sim
    app.state.cards = state
    return app
