"""Sandbox PSPs shipped with paymanager: IPPS, QP and Wise dialects over real HTTP, in one server.

It keeps transfers in memory, counts every transfer POST per transaction id (so a test can prove
nothing was sent twice), signs webhooks as each PSP would, and plays faults set through
`POST /admin/faults` (a JSON object; every key optional, probabilities in [0, 1]):

    latency_ms, latency_jitter_ms   delay of every PSP answer (uniform jitter on top)
    error_rate                      a 503 before anything is recorded
    accept_then_timeout_rate        the transfer is recorded, then the answer hangs for hang_ms
    hang_ms                         how long such an answer hangs (default 30000)
    in_progress_polls               a transfer answers "processing", then completes after this many
                                    inquiries
    in_progress_rate                with in_progress_polls: the share of transfers that do (default all)
    unseen_inquiries                a transfer answers not-found to its first N inquiries (a PSP whose
                                    status API lags its intake: what makes a Wise or QP driver send again)
    failure_rate                    the transfer is rejected
    manual_review_rate              the transfer answers a status no driver knows
    account_invalid_rate            the beneficiary check refuses the account
    rate_limited_requests           the next N PSP requests answer 429 with Retry-After
    retry_after_s                   the Retry-After of those (default 1)
    partner_balance                 {"THB": minor units}; the partner balance each dialect reports
    unreachable                     true: every PSP request answers 503 (a PSP that is down)

`GET /admin/submissions` lists {reference: transfer POSTs}; `POST /admin/reset` forgets everything;
`POST /admin/webhook` returns a signed webhook ({headers, body}) for a transfer.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from paymanager.adapters.psp import signing
from paymanager.sandbox._provider_sim import EXCEPTION_HANDLERS

DEFAULT_API_KEY = "sandbox-key"
DEFAULT_WEBHOOK_SECRET = "sandbox-webhook-secret"  # noqa: S105 - the sandbox's public test secret

# The sandbox's common statuses, and each dialect's word for them.
WORDS = {
    "ipps": {"completed": "ACSC", "processing": "ACSP", "failed": "RJCT", "unknown": "PDNG"},
    "qp": {"completed": "success", "processing": "pending", "failed": "declined", "unknown": "on_hold"},
    "wise": {"completed": "outgoing_payment_sent", "processing": "processing", "failed": "bounced_back",
             "unknown": "charged_back"},
}  # fmt: skip


@dataclass
class Transfer:
    dialect: str
    reference: str
    amount: int
    currency: str
    status: str
    transfer_ref: str
    polls_left: int = 0
    unseen_left: int = 0


@dataclass
class SandboxState:
    api_key: str = DEFAULT_API_KEY
    webhook_secret: str = DEFAULT_WEBHOOK_SECRET
    seed: int | None = None
    faults: dict[str, Any] = field(default_factory=dict)
    transfers: dict[tuple[str, str], Transfer] = field(default_factory=dict)
    submissions: dict[str, int] = field(default_factory=dict)
    requests: int = 0
    rsa_key: Any = field(default_factory=signing.new_rsa_key)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def reset(self) -> None:
        self.faults.clear()
        self.transfers.clear()
        self.submissions.clear()
        self.requests = 0

    def chance(self, name: str) -> bool:
        rate = float(self.faults.get(name, 0) or 0)
        return rate > 0 and self.rng.random() < rate

    def balance(self, currency: str) -> int:
        balances = self.faults.get("partner_balance") or {}
        return int(balances.get(currency, 10_000_000))


def create_app(state: SandboxState | None = None) -> Starlette:
    state = state or SandboxState()

    async def gate(request: Request) -> Response | None:
        """Authentication and the faults every PSP request meets; None lets the request through."""
        state.requests += 1
        if request.headers.get("authorization") != f"Bearer {state.api_key}":
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        if state.faults.get("unreachable"):
            return JSONResponse({"error": "unavailable"}, status_code=503)
        limited = int(state.faults.get("rate_limited_requests", 0) or 0)
        if limited > 0:
            state.faults["rate_limited_requests"] = limited - 1
            retry = str(state.faults.get("retry_after_s", 1))
            return JSONResponse({"error": "rate_limited"}, status_code=429, headers={"Retry-After": retry})
        latency = float(state.faults.get("latency_ms", 0) or 0)
        jitter = float(state.faults.get("latency_jitter_ms", 0) or 0)
        if latency or jitter:
            await asyncio.sleep((latency + state.rng.random() * jitter) / 1000)
        if state.chance("error_rate"):
            return JSONResponse({"error": "internal"}, status_code=503)
        return None

    def submit(dialect: str, reference: str, amount: int, currency: str) -> tuple[Transfer, bool]:
        """Record a transfer POST; the transfer and whether it was new."""
        state.submissions[reference] = state.submissions.get(reference, 0) + 1
        known = state.transfers.get((dialect, reference))
        if known is not None:
            return known, False
        if state.chance("failure_rate"):
            status = "failed"
        elif state.chance("manual_review_rate"):
            status = "unknown"
        elif int(state.faults.get("in_progress_polls", 0) or 0) > 0 and (
            "in_progress_rate" not in state.faults or state.chance("in_progress_rate")
        ):
            status = "processing"
        else:
            status = "completed"
        polls = int(state.faults.get("in_progress_polls", 0) or 0)
        ref = f"{dialect}-{uuid.uuid4().hex[:12]}"
        unseen = int(state.faults.get("unseen_inquiries", 0) or 0)
        transfer = Transfer(
            dialect, reference, amount, currency, status, ref, polls_left=polls, unseen_left=unseen
        )
        state.transfers[(dialect, reference)] = transfer
        return transfer, True

    async def maybe_hang() -> None:
        if state.chance("accept_then_timeout_rate"):
            await asyncio.sleep(float(state.faults.get("hang_ms", 30_000)) / 1000)

    def inquire(dialect: str, reference: str) -> Transfer | None:
        transfer = state.transfers.get((dialect, reference))
        if transfer is not None and transfer.unseen_left > 0:
            transfer.unseen_left -= 1
            return None
        if transfer is not None and transfer.status == "processing":
            transfer.polls_left -= 1
            if transfer.polls_left <= 0:
                transfer.status = "completed"
        return transfer

    def query_refused() -> bool:
        return state.chance("account_invalid_rate")

    # --- IPPS ---------------------------------------------------------------------------------------

    def ipps_view(transfer: Transfer) -> dict[str, Any]:
        return {"txnId": transfer.reference, "transferRef": transfer.transfer_ref, "amount": transfer.amount,
                "status": WORDS["ipps"][transfer.status]}  # fmt: skip

    async def ipps_inquiry(request: Request) -> Response:
        if (refused := await gate(request)) is not None:
            return refused
        body = await request.json()
        if query_refused():
            return JSONResponse({"code": "ACCOUNT_INVALID"}, status_code=422)
        return JSONResponse({"queryRef": f"q-{body['txnId']}"})

    async def ipps_transfer(request: Request) -> Response:
        if (refused := await gate(request)) is not None:
            return refused
        body = await request.json()
        transfer, new = submit("ipps", str(body["txnId"]), int(body["amount"]), str(body["currency"]))
        if not new:
            return JSONResponse({"code": "DUPLICATE_TXN"}, status_code=409)
        await maybe_hang()
        return JSONResponse(ipps_view(transfer))

    async def ipps_status(request: Request) -> Response:
        if (refused := await gate(request)) is not None:
            return refused
        transfer = inquire("ipps", request.path_params["txn_id"])
        if transfer is None:
            return JSONResponse({"code": "NOT_FOUND"}, status_code=404)
        return JSONResponse(ipps_view(transfer))

    async def ipps_balance(request: Request) -> Response:
        if (refused := await gate(request)) is not None:
            return refused
        return JSONResponse({"balanceSatang": state.balance(request.query_params.get("currency", "THB"))})

    # --- QP -------------------------------------------------------------------------------------------

    def qp_view(transfer: Transfer) -> dict[str, Any]:
        return {"merchant_ref": transfer.reference, "payout_id": transfer.transfer_ref,
                "amount_minor": transfer.amount, "state": WORDS["qp"][transfer.status]}  # fmt: skip

    async def qp_validate(request: Request) -> Response:
        if (refused := await gate(request)) is not None:
            return refused
        body = await request.json()
        if query_refused():
            return JSONResponse({"error": "invalid_account"}, status_code=400)
        return JSONResponse({"validation_id": f"v-{body['merchant_ref']}"})

    async def qp_payout(request: Request) -> Response:
        if (refused := await gate(request)) is not None:
            return refused
        body = await request.json()
        transfer, _ = submit("qp", str(body["merchant_ref"]), int(body["amount_minor"]), str(body["ccy"]))
        await maybe_hang()
        return JSONResponse(qp_view(transfer))

    async def qp_status(request: Request) -> Response:
        if (refused := await gate(request)) is not None:
            return refused
        transfer = inquire("qp", request.query_params.get("merchant_ref", ""))
        if transfer is None:
            return JSONResponse({"error": "not_found"}, status_code=404)
        return JSONResponse(qp_view(transfer))

    async def qp_wallet(request: Request) -> Response:
        if (refused := await gate(request)) is not None:
            return refused
        balances = state.faults.get("partner_balance") or {"THB": state.balance("THB")}
        return JSONResponse(
            {"balances": [{"ccy": c, "available_minor": int(v)} for c, v in balances.items()]}
        )

    # --- Wise -----------------------------------------------------------------------------------------

    def wise_view(transfer: Transfer) -> dict[str, Any]:
        return {"id": transfer.transfer_ref, "customerTransactionId": transfer.reference,
                "targetValue": str(Decimal(transfer.amount) / 100),
                "status": WORDS["wise"][transfer.status]}  # fmt: skip

    async def wise_quote(request: Request) -> Response:
        if (refused := await gate(request)) is not None:
            return refused
        body = await request.json()
        if query_refused():
            return JSONResponse({"errors": "invalid targetAccount"}, status_code=422)
        quote = str(uuid.uuid4())
        wise_quotes[quote] = (int(Decimal(str(body["targetAmount"])) * 100), str(body["targetCurrency"]))
        return JSONResponse({"id": quote})

    wise_quotes: dict[str, tuple[int, str]] = {}

    async def wise_transfer(request: Request) -> Response:
        if (refused := await gate(request)) is not None:
            return refused
        body = await request.json()
        amount, currency = wise_quotes.get(str(body.get("quoteUuid")), (0, "THB"))
        transfer, _ = submit("wise", str(body["customerTransactionId"]), amount, currency)
        await maybe_hang()
        return JSONResponse(wise_view(transfer))

    async def wise_status(request: Request) -> Response:
        if (refused := await gate(request)) is not None:
            return refused
        transfer = inquire("wise", request.query_params.get("customerTransactionId", ""))
        if transfer is None:
            return JSONResponse({"errors": "not found"}, status_code=404)
        return JSONResponse(wise_view(transfer))

    async def wise_balances(request: Request) -> Response:
        if (refused := await gate(request)) is not None:
            return refused
        balances = state.faults.get("partner_balance") or {"THB": state.balance("THB")}
        return JSONResponse(
            [{"currency": c, "amount": {"value": float(Decimal(int(v)) / 100), "currency": c}}
             for c, v in balances.items()]
        )  # fmt: skip

    # --- admin ----------------------------------------------------------------------------------------

    async def set_faults(request: Request) -> Response:
        body = await request.json()
        if not isinstance(body, dict):
            return JSONResponse({"error": "a JSON object of faults"}, status_code=400)
        state.faults.update(body)
        return JSONResponse(state.faults)

    async def reset(request: Request) -> Response:
        state.reset()
        return JSONResponse({"reset": True})

    async def submissions(request: Request) -> Response:
        return JSONResponse(state.submissions)

    async def transfers(request: Request) -> Response:
        return JSONResponse(
            {f"{d}:{r}": {"status": t.status, "amount": t.amount} for (d, r), t in state.transfers.items()}
        )

    async def public_key(request: Request) -> Response:
        return JSONResponse({"pem": signing.public_pem(state.rsa_key)})

    async def webhook(request: Request) -> Response:
        """A signed webhook of `dialect` about `reference`: {"headers": ..., "body": "..."}."""
        spec = await request.json()
        dialect, reference = str(spec["dialect"]), str(spec["reference"])
        transfer = state.transfers.get((dialect, reference))
        status = str(spec.get("status") or (transfer.status if transfer else "completed"))
        amount = int(spec["amount"]) if "amount" in spec else (transfer.amount if transfer else 100)
        event_id = str(spec.get("event_id") or uuid.uuid4())
        word = WORDS[dialect][status]
        if dialect == "ipps":
            data: dict[str, Any] = {"eventId": event_id, "txnId": reference, "status": word, "amount": amount}
        elif dialect == "qp":
            data = {"event_id": event_id, "merchant_ref": reference, "state": word, "amount_minor": amount}
        else:
            data = {"event_id": event_id, "event_type": "transfers#state-change",
                    "data": {"customerTransactionId": reference, "current_state": word,
                             "amount": str(Decimal(amount) / 100)}}  # fmt: skip
        body = json.dumps(data).encode()
        if dialect == "ipps":
            headers = {"X-IPPS-Signature": signing.hmac_hex(state.webhook_secret, body)}
        elif dialect == "qp":
            headers = {"X-QP-Signature": signing.qp_header(state.webhook_secret, body, int(time.time()))}
        else:
            headers = {"X-Signature-SHA256": signing.rsa_sign(state.rsa_key, body)}
        return JSONResponse({"headers": headers, "body": body.decode()})

    routes = [
        Route("/ipps/v1/account-inquiry", ipps_inquiry, methods=["POST"]),
        Route("/ipps/v1/transfers", ipps_transfer, methods=["POST"]),
        Route("/ipps/v1/transfers/{txn_id}", ipps_status, methods=["GET"]),
        Route("/ipps/v1/balance", ipps_balance, methods=["GET"]),
        Route("/qp/api/payees/validate", qp_validate, methods=["POST"]),
        Route("/qp/api/payouts", qp_payout, methods=["POST"]),
        Route("/qp/api/payouts", qp_status, methods=["GET"]),
        Route("/qp/api/wallet", qp_wallet, methods=["GET"]),
        Route("/wise/v3/profiles/{profile}/quotes", wise_quote, methods=["POST"]),
        Route("/wise/v1/transfers", wise_transfer, methods=["POST"]),
        Route("/wise/v1/transfers", wise_status, methods=["GET"]),
        Route("/wise/v4/profiles/{profile}/balances", wise_balances, methods=["GET"]),
        Route("/wise/public-key", public_key, methods=["GET"]),
        Route("/admin/faults", set_faults, methods=["POST"]),
        Route("/admin/reset", reset, methods=["POST"]),
        Route("/admin/submissions", submissions, methods=["GET"]),
        Route("/admin/transfers", transfers, methods=["GET"]),
        Route("/admin/webhook", webhook, methods=["POST"]),
    ]
    app = Starlette(routes=routes, exception_handlers=EXCEPTION_HANDLERS)
    app.state.sandbox = state
    return app


def config_for(
    dialect: str, base_url: str, state: SandboxState | None = None, **extra: Any
) -> dict[str, Any]:
    """The PSP configuration (`paymanager psp config set`) that points a driver at this sandbox."""
    config: dict[str, Any] = {"base_url": base_url, "api_key": DEFAULT_API_KEY, **extra}
    if dialect == "wise":
        key = (state or SandboxState()).rsa_key
        config["webhook_public_key"] = signing.public_pem(key)
    else:
        config["webhook_secret"] = DEFAULT_WEBHOOK_SECRET
    return config


def serve(host: str, port: int, *, seed: int | None = None) -> None:
    """Run the sandbox until interrupted (`paymanager sandbox psp --port P`)."""
    import uvicorn

    uvicorn.run(
        create_app(SandboxState(seed=seed)), host=host, port=port, log_level="warning", access_log=False
    )


def start_in_thread(host: str = "127.0.0.1", port: int = 0, *, seed: int | None = None) -> tuple[str, Any]:
    """Serve the sandbox from a daemon thread of this process (`paymanager run --sandbox-psp`, the
    demo); its base URL and the uvicorn server (set `should_exit` to stop it). Port 0: any free one."""
    import socket
    import threading

    import uvicorn

    sock = socket.create_server((host, port), backlog=4096)
    bound = sock.getsockname()[1]
    config = uvicorn.Config(create_app(SandboxState(seed=seed)), log_level="warning", access_log=False,
                            lifespan="off", timeout_graceful_shutdown=1)  # fmt: skip

    class Server(uvicorn.Server):
        def install_signal_handlers(self) -> None:  # the host process owns its signals
            pass

    server = Server(config)
    threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True,
                     name="psp-sandbox").start()  # fmt: skip
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    if not server.started:
        raise RuntimeError("the PSP sandbox did not start")
    return f"http://{host}:{bound}", server
