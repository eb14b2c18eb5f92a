"""The dashboard's PSP pages: transactions (manual review first) with the resolve action, and the
balance monitor's checks. The resolve calls `application.admin.ops.resolve_psp`, as `POST
/admin/psp/{id}/resolve` and `paymanager psp resolve` do, so it is audited with the service id as the
actor and `dashboard` as the channel."""

from __future__ import annotations

import re
import uuid

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, Response

from paymanager.api.dashboard import (
    DASHBOARD_ROUTERS,
    Session,
    _back,
    _optional,
    _payments,
    render,
    require_csrf,
    require_session,
)
from paymanager.application.admin import ops
from paymanager.application.admin.use_cases import Actor
from paymanager.application.intents import events
from paymanager.application.intents.settle import publish
from paymanager.application.psp import review
from paymanager.application.psp.store import PspStore
from paymanager.domain.errors import DomainError, InvalidInputError
from paymanager.domain.psp import PspState

router = APIRouter(include_in_schema=False)
# Mounted under /dashboard by install_dashboard (the api imports this module before it); the links
# are in NAV.
DASHBOARD_ROUTERS.append(router)
PSP_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")


@router.get("/psp")
async def psp_page(
    request: Request,
    session: Session = Depends(require_session),
    state: str | None = "MANUAL_REVIEW",
    psp: str | None = None,
) -> HTMLResponse:
    filters = {"state": _optional(state), "psp": _optional(psp)}
    rows = []
    error = None
    try:
        name = filters["psp"]
        if name is not None and not PSP_NAME.fullmatch(name):
            raise InvalidInputError(f"a PSP name matches {PSP_NAME.pattern}", {"psp": name[:40]})
        async with _payments(request).pool.acquire() as conn:
            rows = await review.list_txs(conn, state=filters["state"], psp=filters["psp"], limit=200)
    except DomainError as exc:
        error = exc.message
    response = render(
        request, "psp.html", session, txs=[row.view() for row in rows], filters=filters,
        states=list(PspState.__members__), flash=error or request.query_params.get("flash"),
    )  # fmt: skip
    if error:
        response.status_code = 422
    return response


@router.get("/psp/{tx_id}")
async def psp_tx_page(
    tx_id: uuid.UUID, request: Request, session: Session = Depends(require_session)
) -> Response:
    async with _payments(request).pool.acquire() as conn:
        try:
            tx = await review.get_tx(conn, tx_id)
        except DomainError:
            return _back("/dashboard/psp", f"no PSP transaction {tx_id}")
    return render(request, "psp_tx.html", session, tx=tx.view(), in_review=tx.state is PspState.MANUAL_REVIEW)


@router.post("/psp/{tx_id}/resolve")
async def resolve(tx_id: uuid.UUID, request: Request, session: Session = Depends(require_csrf)) -> Response:
    form = await request.form()
    outcome = str(form.get("outcome") or "")
    text = str(form.get("text") or "").strip()
    back = f"/dashboard/psp/{tx_id}"
    if outcome not in ("completed", "failed"):
        return _back(back, "choose whether the PSP paid (completed) or not (failed)")
    payments = _payments(request)
    pending: list[events.Event] = []
    try:
        async with payments.pool.acquire() as conn:
            resolved = await ops.resolve_psp(
                payments, conn, Actor(session.service_id, "dashboard"), tx_id,
                completed_ref=text if outcome == "completed" else None,
                failed_reason=text if outcome == "failed" else None, pending=pending,
            )  # fmt: skip
    except DomainError as exc:
        return _back(back, exc.message)
    for event in pending:
        await publish(payments, event)
    return _back(back, f"resolved: {resolved.state.value} ({resolved.resolution})")


@router.get("/balances")
async def balances_page(request: Request, session: Session = Depends(require_session)) -> HTMLResponse:
    async with _payments(request).pool.acquire() as conn:
        checks = await PspStore(conn).balance_checks()
        alerts = await ops.recent_balance_alerts(conn, limit=50)
    return render(request, "balances.html", session, checks=checks, alerts=alerts)
