"""`paymanager services`: register API callers, list, disable them and rotate their secrets.

create, disable and rotate-secret call the admin use cases the admin API calls (application/admin),
so each is audited the same way, with `cli:<user>@<host>` as the actor."""

from __future__ import annotations

import asyncio
import json
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


ServiceIdArg = Annotated[str, typer.Argument(help="The service's id (svc_...).")]
JsonOption = Annotated[bool, typer.Option("--json", help="One JSON document instead of text.")]


@services_app.command("disable")
def disable(service_id: ServiceIdArg) -> None:
    """Refuse a service's requests from now on (every api process within SERVICE_CACHE_TTL_MS).

    Example: `paymanager services disable SERVICE_ID`.
    """
    from paymanager.application.admin.use_cases import Actor, disable_service
    from paymanager.cli._command import fail, load_settings
    from paymanager.db.database import opened

    settings = load_settings()

    async def run() -> bool:
        async with (
            opened(settings, application_name="paymanager:services", max_size=1) as database,
            database.pool.acquire() as conn,
        ):
            return await disable_service(conn, Actor.cli(), service_id)

    if not asyncio.run(run()):
        fail(f"no service {service_id!r}")
    typer.echo(f"{service_id}: disabled")


@services_app.command("rotate-secret")
def rotate_secret(service_id: ServiceIdArg) -> None:
    """Give a service a new secret and print it (shown this once); the old one stops working within
    SERVICE_CACHE_TTL_MS.

    Example: `paymanager services rotate-secret SERVICE_ID`.
    """
    from paymanager.adapters.secret_box import SecretBox
    from paymanager.application.admin.use_cases import Actor
    from paymanager.application.admin.use_cases import rotate_secret as rotate
    from paymanager.cli._command import fail, load_settings
    from paymanager.db.database import opened

    settings = load_settings()
    kek = settings.psp_config_kek.get_secret_value() if settings.psp_config_kek else None
    box = SecretBox.from_config(kek, warn=False)

    async def run() -> str | None:
        async with (
            opened(settings, application_name="paymanager:services", max_size=1) as database,
            database.pool.acquire() as conn,
        ):
            return await rotate(conn, box, Actor.cli(), service_id)

    secret = asyncio.run(run())
    if secret is None:
        fail(f"no service {service_id!r}")
    typer.echo(f"service_id: {service_id}")
    typer.echo(f"secret:     {secret}")
    typer.echo("Keep the secret now: it is stored encrypted and cannot be shown again.", err=True)


@services_app.command("list")
def list_(as_json: JsonOption = False) -> None:
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

    rows = asyncio.run(run())
    if as_json:
        typer.echo(
            json.dumps(
                [
                    {
                        "id": row.id,
                        "name": row.name,
                        "scopes": list(row.scopes),
                        "requests_per_sec_max": row.requests_per_sec_max,
                        "created_at": row.created_at.isoformat(),
                        "disabled_at": row.disabled_at.isoformat() if row.disabled_at else None,
                    }
                    for row in rows
                ]
            )
        )
        return
    for row in rows:
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
