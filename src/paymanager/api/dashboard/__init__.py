"""The operator's dashboard at `/dashboard`: server-rendered pages (Jinja2), assets from the package.

Login with the id and secret of a service with the admin scope; the session is a cookie signed with
DASHBOARD_SESSION_KEY (itsdangerous), HttpOnly, SameSite=Strict, Secure over https, limited to
`/dashboard` and to DASHBOARD_SESSION_TTL_SEC. Every action is a POST carrying the session's CSRF
token in a form field (a forged page on another site can neither read the token nor, with
SameSite=Strict, send the cookie). Actions call `application/admin` as the admin API and the CLI do,
so each is audited with the service id as the actor and `dashboard` as the channel.

Other components add pages with `DASHBOARD_ROUTERS.append(router)` and a `NAV` entry; their
handlers take `session: Session = Depends(require_session)` and render with `render(...)`.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from fastapi import APIRouter, Depends, FastAPI, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from itsdangerous import BadSignature, URLSafeTimedSerializer

from paymanager.api.errors import ApiError, error_response
from paymanager.application.admin import ops
from paymanager.application.admin import use_cases as admin
from paymanager.application.admin.store import IntentFilter
from paymanager.application.context import Payments
from paymanager.application.services import use_cases as services
from paymanager.bootstrap import Components
from paymanager.jobs import JobState
from paymanager.logging import get_logger

log = get_logger("paymanager.dashboard")

HERE = Path(__file__).parent
COOKIE = "pm_dashboard"
templates = Jinja2Templates(directory=str(HERE / "templates"))

router = APIRouter(prefix="/dashboard", include_in_schema=False)
# Pages other components add (PSP manual review, balances, webhook deliveries), and their links.
DASHBOARD_ROUTERS: list[APIRouter] = []
NAV: list[tuple[str, str]] = [
    ("/dashboard", "Queues"),
    ("/dashboard/jobs?state=dead", "Dead letters"),
    ("/dashboard/jobs", "Jobs"),
    ("/dashboard/intents", "Intents"),
    ("/dashboard/psp", "PSP review"),
    ("/dashboard/balances", "Balances"),
    ("/dashboard/audit", "Audit"),
]


@dataclass(frozen=True, slots=True)
class Session:
    service_id: str
    csrf: str


class Sessions:
    """Signs and reads the session cookie."""

    def __init__(self, key: bytes, ttl_sec: int) -> None:
        self._serializer = URLSafeTimedSerializer(key, salt="paymanager.dashboard")
        self.ttl_sec = ttl_sec

    def issue(self, service_id: str) -> tuple[Session, str]:
        session = Session(service_id, secrets.token_urlsafe(24))
        return session, self._serializer.dumps({"sid": service_id, "csrf": session.csrf})

    def read(self, cookie: str | None) -> Session | None:
        if not cookie:
            return None
        try:
            data = self._serializer.loads(cookie, max_age=self.ttl_sec)
        except BadSignature:
            return None
        if (
            not isinstance(data, dict)
            or not isinstance(data.get("sid"), str)
            or not isinstance(data.get("csrf"), str)
        ):
            return None
        return Session(data["sid"], data["csrf"])


def session_key(components: Components) -> bytes:
    """DASHBOARD_SESSION_KEY, else a key derived from PSP_CONFIG_KEK, else (development) a random key
    of this process: sessions then do not survive a restart nor move between api processes."""
    settings = components.settings
    if settings.dashboard_session_key is not None:
        return settings.dashboard_session_key.get_secret_value().encode()
    if settings.psp_config_kek is not None:
        return hmac.new(
            settings.psp_config_kek.get_secret_value().encode(), b"dashboard-session", hashlib.sha256
        ).digest()
    log.warning("DASHBOARD_SESSION_KEY and PSP_CONFIG_KEK are unset: dashboard sessions last one process")
    return secrets.token_bytes(32)


class LoginRequired(Exception):
    pass


def _sessions(request: Request) -> Sessions:
    sessions: Sessions = request.app.state.dashboard_sessions
    return sessions


def _payments(request: Request) -> Payments:
    payments: Payments = request.app.state.payments
    return payments


async def require_session(request: Request) -> Session:
    """The logged-in operator; a page without a session redirects to the login (LoginRequired)."""
    session = _sessions(request).read(request.cookies.get(COOKIE))
    if session is None:
        raise LoginRequired()
    return session


async def require_csrf(request: Request, session: Session = Depends(require_session)) -> Session:
    """An action: logged in, and the form's CSRF token is the session's."""
    form = await request.form()
    token = form.get("csrf")
    if not isinstance(token, str) or not hmac.compare_digest(token.encode(), session.csrf.encode()):
        raise ApiError(
            403, "csrf_failed", "the form's CSRF token does not match the session; reload the page"
        )
    return session


def render(request: Request, template: str, session: Session | None, **context: Any) -> HTMLResponse:
    flash = request.query_params.get("flash")
    return templates.TemplateResponse(
        request, template,
        {"session": session, "nav": NAV, "active": request.url.path, "flash": flash, "title": template[:-5],
         **context},
    )  # fmt: skip


def _back(path: str, flash: str) -> RedirectResponse:
    from urllib.parse import quote

    sep = "&" if "?" in path else "?"
    return RedirectResponse(f"{path}{sep}flash={quote(flash)}", status_code=303)


def _referer_path(request: Request, default: str) -> str:
    """Where an action returns: the page it was sent from, when that is a dashboard page."""
    referer = request.headers.get("referer", "")
    marker = referer.find("/dashboard")
    if marker < 0:
        return default
    path = referer[marker:].split("#")[0]
    # Drop an earlier flash so messages do not pile up in the address.
    return "&".join(p for p in path.split("&") if not p.startswith("flash=")).replace("?flash=", "?x=")


# --- login -------------------------------------------------------------------------------------


@router.get("/login")
async def login_page(request: Request) -> HTMLResponse:
    return render(request, "login.html", None)


@router.post("/login")
async def login(
    request: Request, service_id: str = Form(max_length=100), secret: str = Form(max_length=200)
) -> Response:
    payments = _payments(request)
    async with payments.pool.acquire() as conn:
        identity = await services.load_service(conn, payments.box, service_id)
    ok = (
        identity is not None
        and not identity.disabled
        and hmac.compare_digest(identity.secret.reveal(), secret.encode())
        and identity.is_admin
    )
    if not ok:
        log.warning("dashboard login refused", service_id=service_id[:100])
        response = render(
            request, "login.html", None, error="Unknown service, wrong secret, or no admin scope."
        )
        response.status_code = 401
        return response
    _, cookie = _sessions(request).issue(service_id)
    redirect = RedirectResponse("/dashboard", status_code=303)
    redirect.set_cookie(
        COOKIE, cookie, max_age=_sessions(request).ttl_sec, path="/dashboard", httponly=True,
        samesite="strict", secure=request.url.scheme == "https",
    )  # fmt: skip
    log.info("dashboard login", service_id=service_id)
    return redirect


@router.post("/logout")
async def logout(_: Session = Depends(require_csrf)) -> Response:
    response = RedirectResponse("/dashboard/login", status_code=303)
    response.delete_cookie(COOKIE, path="/dashboard")
    return response


# --- queues ------------------------------------------------------------------------------------


async def _queues(request: Request) -> dict[str, Any]:
    """The queues with their depth and age, and their throughput over the cluster (from the completed
    jobs in the database, so every api process shows the same figure)."""
    payments = _payments(request)
    async with payments.pool.acquire() as conn:
        views = await admin.queues(conn)
        rates = await ops.throughput(conn, kept_max=payments.settings.job_retention_completed_count)
    return {"queues": views, "throughput": rates, "window_min": ops.THROUGHPUT_WINDOW_S // 60}


@router.get("")
async def queues_page(request: Request, session: Session = Depends(require_session)) -> HTMLResponse:
    return render(request, "queues.html", session, **await _queues(request))


@router.get("/queues-table")
async def queues_table(request: Request, session: Session = Depends(require_session)) -> HTMLResponse:
    return render(request, "queues_table.html", session, **await _queues(request))


@router.post("/queues/{name}/{action}")
async def queue_action(
    name: str, action: str, request: Request, session: Session = Depends(require_csrf)
) -> Response:
    actor = admin.Actor(session.service_id, "dashboard")
    operations = {"pause": admin.pause_queue, "resume": admin.resume_queue}
    if action not in operations:
        raise ApiError(404, "not_found", f"no queue action {action!r}")
    async with _payments(request).pool.acquire() as conn:
        try:
            await operations[action](conn, actor, name)
        except ValueError as exc:
            return _back("/dashboard", str(exc))
    return _back("/dashboard", f"queue {name}: {action}d")


# --- jobs --------------------------------------------------------------------------------------


def _optional(value: str | None) -> str | None:
    return value.strip() or None if value is not None else None


@router.get("/jobs")
async def jobs_page(
    request: Request,
    session: Session = Depends(require_session),
    state: str | None = None,
    queue: str | None = None,
    kind: str | None = None,
    intent_id: str | None = None,
) -> HTMLResponse:
    filters = {"state": _optional(state), "queue": _optional(queue), "kind": _optional(kind),
               "intent_id": _optional(intent_id)}  # fmt: skip
    rows: list[dict[str, object]] = []
    error = None
    try:
        where = admin.JobFilter(
            state=JobState(filters["state"]) if filters["state"] else None, queue=filters["queue"],
            kind=filters["kind"], intent_id=uuid.UUID(filters["intent_id"]) if filters["intent_id"] else None,
        )  # fmt: skip
        async with _payments(request).pool.acquire() as conn:
            rows = await admin.list_jobs(conn, where, limit=200)
    except ValueError as exc:
        error = str(exc)
    return render(
        request, "jobs.html", session, jobs=rows, filters=filters, states=[s.value for s in JobState],
        flash=error or request.query_params.get("flash"),
    )  # fmt: skip


@router.get("/jobs/{job_id}")
async def job_page(
    job_id: int, request: Request, session: Session = Depends(require_session)
) -> HTMLResponse:
    async with _payments(request).pool.acquire() as conn:
        try:
            job = await admin.get_job(conn, job_id)
        except ValueError:
            job = None
    if job is None:
        response = render(
            request, "jobs.html", session, jobs=[], filters={}, states=[], flash=f"no job {job_id}"
        )
        response.status_code = 404
        return response
    errors = job.get("errors") or []
    payload = orjson.dumps(job.get("payload"), option=orjson.OPT_INDENT_2).decode()
    return render(request, "job.html", session, job=job, payload=payload, errors=errors)


@router.post("/jobs/{job_id}/retry")
async def retry_job(job_id: int, request: Request, session: Session = Depends(require_csrf)) -> Response:
    back = _referer_path(request, "/dashboard/jobs")
    async with _payments(request).pool.acquire() as conn:
        try:
            done = await admin.retry_job(conn, admin.Actor(session.service_id, "dashboard"), job_id)
        except ValueError as exc:
            return _back(back, str(exc))
    return _back(back, f"job {job_id} is available" if done else f"job {job_id} cannot be retried")


@router.post("/jobs/{job_id}/cancel")
async def cancel_job(job_id: int, request: Request, session: Session = Depends(require_csrf)) -> Response:
    back = _referer_path(request, "/dashboard/jobs")
    async with _payments(request).pool.acquire() as conn:
        try:
            result = await admin.cancel_job(conn, admin.Actor(session.service_id, "dashboard"), job_id)
        except ValueError as exc:
            return _back(back, str(exc))
    return _back(back, f"job {job_id}: {result.outcome}" if result else f"job {job_id} is finished")


@router.post("/jobs/replay")
async def replay_jobs(request: Request, session: Session = Depends(require_csrf)) -> Response:
    form = await request.form()
    queue = _optional(str(form.get("queue") or ""))
    kind = _optional(str(form.get("kind") or ""))
    back = _referer_path(request, "/dashboard/jobs?state=dead")
    async with _payments(request).pool.acquire() as conn:
        try:
            ids = await admin.replay_dead(
                conn, admin.Actor(session.service_id, "dashboard"),
                admin.ReplayFilter(kind=kind, queue=queue), replay_all=True,
            )  # fmt: skip
        except ValueError as exc:
            return _back(back, str(exc))
    return _back(back, f"replayed {len(ids)} dead job(s)")


# --- intents and the audit ------------------------------------------------------------------------


@router.get("/intents")
async def intents_page(
    request: Request,
    session: Session = Depends(require_session),
    intent_id: str | None = None,
    status: str | None = None,
    channel: str | None = None,
) -> HTMLResponse:
    filters = {"intent_id": _optional(intent_id), "status": _optional(status), "channel": _optional(channel)}
    found = []
    error = None
    try:
        where = IntentFilter(
            intent_id=uuid.UUID(filters["intent_id"]) if filters["intent_id"] else None,
            status=filters["status"], channel=filters["channel"],
        )  # fmt: skip
        async with _payments(request).pool.acquire() as conn:
            found = await admin.search_intents(conn, where, limit=100)
    except ValueError as exc:
        error = str(exc)
    return render(request, "intents.html", session, intents=found, filters=filters, flash=error)


@router.get("/intents/{intent_id}")
async def intent_page(
    intent_id: uuid.UUID, request: Request, session: Session = Depends(require_session)
) -> Response:
    payments = _payments(request)
    async with payments.pool.acquire() as conn:
        found = await admin.search_intents(conn, IntentFilter(intent_id=intent_id), limit=1)
        timeline = await ops.intent_timeline(payments, conn, intent_id)
    if not found or timeline is None:
        return _back("/dashboard/intents", f"no intent {intent_id}")
    return render(request, "intent.html", session, intent=found[0], timeline=timeline)


@router.get("/audit")
async def audit_page(request: Request, session: Session = Depends(require_session)) -> HTMLResponse:
    async with _payments(request).pool.acquire() as conn:
        entries = await admin.audit_log(conn, limit=200)
    return render(request, "audit.html", session, entries=entries)


def install_dashboard(app: FastAPI, components: Components) -> None:
    app.state.dashboard_sessions = Sessions(
        session_key(components), components.settings.dashboard_session_ttl_sec
    )
    app.mount("/dashboard/static", StaticFiles(directory=str(HERE / "static")), name="dashboard-static")
    app.include_router(router)
    for extra in DASHBOARD_ROUTERS:
        app.include_router(extra, prefix="/dashboard")

    @app.exception_handler(LoginRequired)
    async def _login_required(request: Request, _: LoginRequired) -> Response:
        if request.method == "GET":
            return RedirectResponse("/dashboard/login", status_code=303)
        return error_response(401, "login_required", "log in to the dashboard first")
