"""The Titreo gift-card provider's sandbox: balances, debits and cancels over HTTP, with faults.

`paymanager sandbox giftcard --port P` serves it. The dialect is documented in
`paymanager.adapters.giftcard.titreo`; cards are created with `POST /_sandbox/cards`
(`{"cards": [{"card", "balance", "currency"}]}`) and read back with `GET /_sandbox/cards/{card}`.
Counters per card: debit_submissions, debits_applied, cancel_submissions, cancels_applied.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from paymanager.sandbox._provider_sim import EXCEPTION_HANDLERS, ProviderSim, unavailable

CARDS_PER_CALL_MAX = 10_000


@dataclass
class Card:
    balance: int
    currency: str


@dataclass
class Debit:
    debit_id: str
    card: str
    amount: int
    # captured, or cancelled (with found=False: cancelled before it arrived, a tombstone).
    status: str
    found: bool = True


class GiftCardState:
    def __init__(self) -> None:
        self.cards: dict[str, Card] = {}
        self.debits: dict[str, Debit] = {}

    def reset(self) -> None:
        self.cards.clear()
        self.debits.clear()


def _debit_body(debit: Debit, card: Card | None) -> dict[str, Any]:
    return {
        "debit_id": debit.debit_id,
        "card": debit.card,
        "amount": debit.amount,
        "status": debit.status,
        "balance_after": card.balance if card else None,
    }


def create_app(sim: ProviderSim | None = None) -> Starlette:
    sim = sim or ProviderSim()
    state = GiftCardState()

    async def put_cards(request: Request) -> JSONResponse:
        body = await request.json()
        cards = body.get("cards") if isinstance(body, dict) else None
        if not isinstance(cards, list) or len(cards) > CARDS_PER_CALL_MAX:
            return JSONResponse({"error": "bad_request", "message": "cards: a list"}, status_code=400)
        for item in cards:
            state.cards[str(item["card"])] = Card(int(item["balance"]), str(item.get("currency", "THB")))
        return JSONResponse({"cards": len(cards)})

    async def get_card(request: Request) -> JSONResponse:
        card = request.path_params["card"]
        found = state.cards.get(card)
        if found is None:
            return JSONResponse({"error": "card_not_found"}, status_code=404)
        return JSONResponse({"card": card, "balance": found.balance, "currency": found.currency})

    async def balance(request: Request) -> JSONResponse:
        card = request.path_params["card"]
        await sim.delay()
        found = state.cards.get(card)
        if found is None:
            return JSONResponse({"error": "card_not_found"}, status_code=404)
        return JSONResponse({"card": card, "balance": found.balance, "currency": found.currency})

    async def debit(request: Request) -> JSONResponse:
        body = await request.json()
        idempotency_key = request.headers.get("idempotency-key")
        card_number = str(body.get("card", ""))
        if not idempotency_key:
            return JSONResponse({"error": "idempotency_key_required"}, status_code=400)
        sim.count(card_number, "debit_submissions")
        await sim.delay()
        if sim.should_fail(card_number):
            return unavailable()
        # From here to the answer nothing awaits: a check and its effect are one step of the loop.
        seen = state.debits.get(idempotency_key)
        card = state.cards.get(card_number)
        if seen is not None:
            if seen.status == "cancelled":
                return JSONResponse({"error": "debit_cancelled", **_debit_body(seen, card)}, status_code=409)
            return await sim.answer_or_hang(JSONResponse(_debit_body(seen, card), status_code=200))
        if card is None:
            return JSONResponse({"error": "card_not_found"}, status_code=404)
        amount = int(body.get("amount", 0))
        if amount <= 0 or body.get("currency") != card.currency:
            return JSONResponse({"error": "bad_request", "message": "amount or currency"}, status_code=400)
        if sim.declines(card_number) or card.balance < amount:
            return JSONResponse({"error": "insufficient_balance", "balance": card.balance}, status_code=402)
        card.balance -= amount
        made = Debit(f"dbt_{uuid.uuid4().hex}", card_number, amount, "captured")
        state.debits[idempotency_key] = made
        sim.count(card_number, "debits_applied")
        return await sim.answer_or_hang(JSONResponse(_debit_body(made, card), status_code=201))

    async def cancel(request: Request) -> JSONResponse:
        key = request.path_params["key"]
        body = await request.json()
        card_number = str(body.get("card", ""))
        sim.count(card_number, "cancel_submissions")
        await sim.delay()
        if sim.should_fail():
            return unavailable()
        seen = state.debits.get(key)
        if seen is None:
            # Cancelled before it arrived: a tombstone refuses the debit if it comes later.
            state.debits[key] = Debit(f"dbt_{uuid.uuid4().hex}", card_number, 0, "cancelled", found=False)
            return await sim.answer_or_hang(JSONResponse({"status": "cancelled", "debit_found": False}))
        if seen.status == "captured":
            seen.status = "cancelled"
            card = state.cards.get(seen.card)
            if card is not None:
                card.balance += seen.amount
            sim.count(seen.card, "cancels_applied")
        return await sim.answer_or_hang(
            JSONResponse({"status": "cancelled", "debit_id": seen.debit_id, "debit_found": seen.found})
        )

    app = Starlette(
        exception_handlers=EXCEPTION_HANDLERS,
        routes=[
            *sim.admin_routes(state.reset),
            Route("/_sandbox/cards", put_cards, methods=["POST"]),
            Route("/_sandbox/cards/{card}", get_card, methods=["GET"]),
            Route("/v1/cards/{card}/balance", balance, methods=["GET"]),
            Route("/v1/debits", debit, methods=["POST"]),
            Route("/v1/debits/{key}/cancel", cancel, methods=["POST"]),
        ],
    )
    app.state.sim = sim
    app.state.giftcards = state
    return app
