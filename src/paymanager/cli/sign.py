"""`paymanager sign` and `paymanager call`: sign API requests so a person can use the API from a shell."""

from __future__ import annotations

import time
import uuid
from typing import Annotated
from urllib.parse import urlsplit

import typer

from paymanager.api.signing import signed_headers

ServiceId = Annotated[
    str, typer.Option("--service-id", envvar="PAYMANAGER_SERVICE_ID", help="The caller's service id.")
]
Secret = Annotated[
    str,
    typer.Option(
        "--secret", envvar="PAYMANAGER_SERVICE_SECRET", help="The caller's secret.", show_default=False
    ),
]
Body = Annotated[str, typer.Argument(help="The JSON body, exactly as it will be sent.")]


def _target(path: str) -> str:
    parts = urlsplit(path)
    return f"{parts.path}?{parts.query}" if parts.query else parts.path


def sign_command(
    method: Annotated[str, typer.Argument(help="GET, POST, DELETE ...")],
    path: Annotated[str, typer.Argument(help="Path and query, e.g. /intents?limit=5")],
    body: Body = "",
    service_id: ServiceId = "",
    secret: Secret = "",
) -> None:
    """Print the X-Service-Id, X-Timestamp, X-Nonce and X-Signature headers of one request (valid
    ±300 s, once), and a fresh Idempotency-Key for a POST."""
    if not service_id or not secret:
        raise typer.BadParameter("set --service-id and --secret (or PAYMANAGER_SERVICE_ID/_SECRET)")
    headers = signed_headers(
        service_id, secret.encode(), method, _target(path), int(time.time()), body.encode()
    )
    if method.upper() == "POST":
        # Every POST needs one; printed so the lines can be pasted as curl -H arguments as they are.
        headers["Idempotency-Key"] = str(uuid.uuid4())
    for name, value in headers.items():
        typer.echo(f"{name}: {value}")


def call_command(
    method: Annotated[str, typer.Argument(help="GET, POST, DELETE ...")],
    path: Annotated[str, typer.Argument(help="Path and query, e.g. /intents?limit=5")],
    body: Body = "",
    service_id: ServiceId = "",
    secret: Secret = "",
    url: Annotated[
        str | None,
        typer.Option("--url", envvar="PAYMANAGER_URL", help="Base URL; default http://127.0.0.1:$PORT"),
    ] = None,
    idempotency_key: Annotated[
        str | None, typer.Option("--idempotency-key", help="For POST; a fresh UUID when omitted.")
    ] = None,
) -> None:
    """Sign and send one request; print the status and the response body. Exit 1 on a 4xx/5xx."""
    import httpx

    from paymanager.cli._command import fail, load_settings

    if not service_id or not secret:
        raise typer.BadParameter("set --service-id and --secret (or PAYMANAGER_SERVICE_ID/_SECRET)")
    base = url or f"http://127.0.0.1:{load_settings().port}"
    payload = body.encode()
    headers = signed_headers(service_id, secret.encode(), method, _target(path), int(time.time()), payload)
    if payload:
        headers["Content-Type"] = "application/json"
    if method.upper() == "POST":
        headers["Idempotency-Key"] = idempotency_key or str(uuid.uuid4())
    # An event stream (`/intents/{id}/events`) is printed as it arrives and may be quiet for long.
    streaming = path.split("?")[0].endswith("/events")
    timeout = httpx.Timeout(30, read=None if streaming else 30)
    try:
        with httpx.stream(
            method.upper(), base.rstrip("/") + path, content=payload, headers=headers, timeout=timeout
        ) as response:
            typer.echo(f"{response.status_code} {response.reason_phrase}", err=True)
            for chunk in response.iter_text():
                typer.echo(chunk, nl=False)
            typer.echo("")
    except httpx.ConnectError as exc:
        fail(f"error: cannot connect to {base}: {exc} (is `paymanager run` with the api role up?)")
    except httpx.HTTPError as exc:
        fail(f"error: {method.upper()} {path}: {exc.__class__.__name__}: {exc}")
    raise typer.Exit(0 if response.status_code < 400 else 1)


def register(app: typer.Typer) -> None:
    app.command("sign")(sign_command)
    app.command("call")(call_command)
