"""The FastAPI application of the `api` role: health, metrics, docs, and the routers of each component."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import asyncpg
from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from fastapi_offline import FastAPIOffline
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from paymanager import __version__, tracing
from paymanager import metrics as prometheus
from paymanager.api.errors import error_response, install_error_handlers
from paymanager.api.http_metrics import HttpMetricsMiddleware
from paymanager.api.payments import install_payments_api, install_sessions_api
from paymanager.bootstrap import Components
from paymanager.db import migrations

API_DESCRIPTION = """
paymanager's HTTP API. Every route except `/livez`, `/readyz`, `/metrics` and the docs requires an
HMAC signature (see *Authentication* below).
"""


HTML_PAGES = ("/docs", "/redoc", "/dashboard")  # /redoc.standalone.js too (a prefix)
PAGES_POLICY = (
    "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
    "script-src 'self' 'unsafe-inline'; worker-src 'self' blob:; connect-src 'self'; frame-ancestors 'none'"
)


class PagesPolicyMiddleware:
    """The pages for people load nothing from elsewhere: ReDoc's bundle still asks a CDN for its
    logo, which this policy stops in the browser before any request leaves the machine.

    Plain ASGI rather than `@app.middleware("http")`: Starlette's BaseHTTPMiddleware runs every
    request, API calls included, through a task group and a streamed copy of the response.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not str(scope.get("path", "")).startswith(HTML_PAGES):
            await self.app(scope, receive, send)
            return

        async def send_with_policy(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    (k, v) for k, v in message.get("headers", []) if k.lower() != b"content-security-policy"
                ]
                headers.append((b"content-security-policy", PAGES_POLICY.encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_policy)


def create_app(components: Components) -> FastAPI:
    """The app of one process's components; the payments routes need its api role (the event hub)."""
    # Swagger UI and ReDoc from the assets fastapi-offline ships in its wheel: the docs work with no
    # internet (FastAPI's own pages load them from a CDN).
    app: FastAPI = FastAPIOffline(
        title="paymanager",
        version=__version__,
        description=API_DESCRIPTION,
        static_url="/docs-assets",
        redoc_url=None,
    )
    _serve_redoc(app)
    # With tracing on, the same layer opens the request's span: the access log line is inside it.
    app.add_middleware(HttpMetricsMiddleware, traced=tracing.enabled())
    app.add_middleware(PagesPolicyMiddleware)

    app.state.components = components
    install_error_handlers(app)

    @app.get("/livez", tags=["health"], summary="The process is alive")
    async def livez() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"], summary="The database is reachable and its schema current")
    async def readyz() -> Response:
        checks: dict[str, Any] = {}
        pool = components.database.pool
        try:
            async with pool.acquire(timeout=2) as conn:
                missing = await migrations.missing_migrations(conn)
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            return error_response(503, "database_unreachable", str(exc))
        checks["database"] = "ok"
        if missing:
            return error_response(
                503,
                "schema_outdated",
                "run `paymanager migrate`",
                {"missing": [f"{m.version:04d}_{m.name}" for m in missing]},
            )
        checks["schema"] = "current"
        try:
            await components.ledger.ping()
        except Exception as exc:
            return error_response(
                503, "ledger_unreachable", str(exc), {"backend": components.settings.ledger_backend}
            )
        checks["ledger"] = "ok"
        checks["ledger_backend"] = components.settings.ledger_backend
        return JSONResponse({"status": "ready", "checks": checks})

    @app.get("/metrics", tags=["health"], summary="Prometheus metrics", response_class=Response)
    async def metrics() -> Response:
        body = await prometheus.render(
            components.database.pool, components.settings.metrics_query_interval_ms
        )
        return Response(body, media_type=prometheus.CONTENT_TYPE_LATEST)

    _document_idempotency_key(app)
    if components.event_hub is not None:
        install_payments_api(app, components.payments, components.event_hub)
        if components.settings.sessions_enabled and components.sessions is not None:
            install_sessions_api(app, components.sessions)
        # Imported here: the dashboard's templates load only where the api role runs.
        from paymanager.api.dashboard import (
            install_dashboard,
            psp_pages,  # noqa: F401 - its pages join DASHBOARD_ROUTERS
        )

        install_dashboard(app, components)
    return app


IDEMPOTENCY_KEY_PARAMETER = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": True,
    "description": "Up to 255 characters (a UUID is a good key); the same key and body answer the first "
    "response again with `Idempotent-Replayed: true`, another body 409 `idempotency_key_reused`.",
    "schema": {"type": "string", "minLength": 1, "maxLength": 255},
}


def _document_idempotency_key(app: FastAPI) -> None:
    """The OpenAPI of every signed POST lists the Idempotency-Key header it requires (the header is
    read by `run_idempotent`, not declared by each route)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = build()
        for path, operations in schema.get("paths", {}).items():
            post = operations.get("post")
            if post is None or path.startswith("/dashboard"):
                continue
            parameters = post.setdefault("parameters", [])
            if not any(p.get("name") == "Idempotency-Key" for p in parameters):
                parameters.append(IDEMPOTENCY_KEY_PARAMETER)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


REDOC_CDN_LOGO = b"https://cdn.redoc.ly/redoc/logo-mini.svg"


def _serve_redoc(app: FastAPI) -> None:
    """ReDoc from fastapi-offline's bundle, which still draws its footer's logo from a CDN: served
    with that one address turned into a data URI, so the page asks nothing of another host."""
    import fastapi_offline
    from fastapi.openapi.docs import get_redoc_html
    from fastapi.responses import HTMLResponse

    bundle = Path(fastapi_offline.__file__).parent / "static" / "redoc.standalone.js"
    patched: list[bytes] = []

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=app.openapi_url or "/openapi.json", title=f"{app.title} - ReDoc",
            redoc_js_url="/redoc.standalone.js", redoc_favicon_url="/docs-assets/favicon.png",
            with_google_fonts=False,
        )  # fmt: skip

    @app.get("/redoc.standalone.js", include_in_schema=False)
    async def redoc_js() -> Response:
        if not patched:
            patched.append(bundle.read_bytes().replace(REDOC_CDN_LOGO, b"data:image/svg+xml,%3Csvg/%3E"))
        return Response(patched[0], media_type="text/javascript", headers={"Cache-Control": "max-age=3600"})
