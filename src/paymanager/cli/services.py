"""`paymanager services`: register API callers and list them."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

services_app = typer.Typer(help="Services: the callers of the HTTP API (HMAC-signed).", no_args_is_help=True)


@services_app.command("create")
def create(
    name: Annotated[str, typer.Argument(help="A unique name, e.g. checkout-backend.")],
    admin: Annotated[bool, typer.Option("--admin", help="Grant the admin scope.")] = False,
) -> None:
    """Register a service and print its id and secret. The secret is shown this once only."""
    from paymanager.adapters.secret_box import SecretBox
    from paymanager.application.admin.use_cases import Actor, create_service
    from paymanager.application.errors import ServiceNameTakenError
    from paymanager.cli._command import fail, load_settings
    from paymanager.db.database import opened

    settings = load_settings()
    kek = settings.psp_config_kek.get_secret_value() if settings.psp_config_kek else None
    box = SecretBox.from_config(kek, warn=False)

    async def run() -> tuple[str, str, list[str]]:
        async with (
            opened(settings, application_name="paymanager:services", max_size=1) as database,
            database.pool.acquire() as conn,
        ):
            identity, secret = await create_service(conn, box, Actor.cli(), name, admin_scope=admin)
        return identity.id, secret, sorted(identity.scopes)

    try:
        service_id, secret, scopes = asyncio.run(run())
    except ServiceNameTakenError as exc:
        fail(exc.message)
    typer.echo(f"service_id: {service_id}")
    typer.echo(f"secret:     {secret}")
    typer.echo(f"scopes:     {','.join(scopes) or '(none)'}")
    typer.echo("Keep the secret now: it is stored encrypted and cannot be shown again.", err=True)


@services_app.command("list")
def list_() -> None:
    """List services (never their secrets)."""
    from paymanager.application.services.store import ServiceListing
    from paymanager.application.services.use_cases import list_services
    from paymanager.cli._command import load_settings
    from paymanager.db.database import opened

    settings = load_settings()

    async def run() -> list[ServiceListing]:
        async with (
            opened(settings, application_name="paymanager:services", max_size=1) as database,
            database.pool.acquire() as conn,
        ):
            return await list_services(conn)

    for row in asyncio.run(run()):
        scopes = ",".join(row.scopes) or "-"
        disabled = " (disabled)" if row.disabled_at else ""
        limit = row.requests_per_sec_max or "default"
        typer.echo(f"{row.id}  {row.name}  scopes={scopes}  rate_limit={limit}{disabled}")


@services_app.command("rate-limit")
def rate_limit(
    service_id: Annotated[str, typer.Argument(help="The service's id (svc_...).")],
    per_sec: Annotated[str, typer.Argument(help="Requests per second per api process, or `default`.")],
) -> None:
    """Give a service its own API rate limit (429 rate_limited beyond it), or back the default."""
    from paymanager.application.services.use_cases import set_rate_limit
    from paymanager.cli._command import fail, load_settings
    from paymanager.db.database import opened

    if per_sec == "default":
        limit: int | None = None
    else:
        try:
            limit = int(per_sec)
        except ValueError:
            raise typer.BadParameter(f"{per_sec!r} is neither a number nor `default`") from None
    settings = load_settings()

    async def run() -> bool:
        async with (
            opened(settings, application_name="paymanager:services", max_size=1) as database,
            database.pool.acquire() as conn,
        ):
            return await set_rate_limit(conn, service_id, limit)

    try:
        found = asyncio.run(run())
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    if not found:
        fail(f"no service {service_id!r}")
    typer.echo(
        f"{service_id}: rate limit {limit if limit is not None else 'default'} requests/s per api process"
    )


def register(app: typer.Typer) -> None:
    app.add_typer(services_app, name="services")
