"""`paymanager webhooks`: the delivery log and replays of merchant webhooks (every service's)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

webhooks_app = typer.Typer(
    help="Merchant webhooks: list deliveries, replay dead letters.", no_args_is_help=True
)

STATUSES = ("pending", "retrying", "succeeded", "dead", "cancelled")
REPLAY_ALL_MAX = 10_000


@webhooks_app.command("ls")
def ls(
    status: Annotated[
        str | None, typer.Option(help=f"Only deliveries in this status ({', '.join(STATUSES)}).")
    ] = None,
    service: Annotated[str | None, typer.Option(help="Only this service's deliveries (svc_...).")] = None,
    endpoint: Annotated[str | None, typer.Option(help="Only this endpoint's deliveries (we_...).")] = None,
    limit: Annotated[int, typer.Option(min=1, max=200)] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="JSON lines, one delivery each.")] = False,
) -> None:
    """Deliveries, newest first: status, attempts, last response code, latency, next try."""
    from paymanager.application.webhooks.endpoints import delivery_view, list_deliveries
    from paymanager.application.webhooks.store import Delivery
    from paymanager.cli._command import fail, load_settings, run_async
    from paymanager.db.database import opened

    if status is not None and status not in STATUSES:
        fail(f"--status must be one of {', '.join(STATUSES)}", 2)
    settings = load_settings()

    async def run() -> list[Delivery]:
        async with (
            opened(settings, application_name="paymanager:webhooks", max_size=1) as database,
            database.pool.acquire() as conn,
        ):
            return await list_deliveries(
                conn, service, endpoint_id=endpoint, status=status, before=None, limit=limit
            )

    rows = run_async(run())
    if as_json:
        for d in rows:
            typer.echo(json.dumps(delivery_view(d), default=str))
        return
    if not rows:
        typer.echo("no deliveries")
    for d in rows:
        code = d.last_status_code if d.last_status_code is not None else "-"
        latency = f"{d.last_latency_ms}ms" if d.last_latency_ms is not None else "-"
        next_try = d.next_attempt_at.isoformat() if d.next_attempt_at else "-"
        error = f"  error={d.last_error}" if d.last_error else ""
        typer.echo(
            f"{d.id}  {d.status:<9}  {d.type:<18} endpoint={d.endpoint_id}  attempts={d.attempts}  "
            f"code={code}  latency={latency}  next={next_try}{error}"
        )


@webhooks_app.command("replay")
def replay(
    delivery_id: Annotated[str | None, typer.Argument(help="The delivery to send again (whd_...).")] = None,
    all_dead: Annotated[
        bool, typer.Option("--all-dead", help="Replay every dead delivery (with filters).")
    ] = False,
    service: Annotated[str | None, typer.Option(help="With --all-dead: only this service's.")] = None,
    endpoint: Annotated[str | None, typer.Option(help="With --all-dead: only this endpoint's.")] = None,
) -> None:
    """Send a finished delivery again (same event id and body); exit 1 if any replay was refused."""
    from paymanager.application.context import system_clock
    from paymanager.application.webhooks.endpoints import list_deliveries, replay_delivery
    from paymanager.cli._command import fail, load_settings, run_async
    from paymanager.db.database import opened
    from paymanager.domain.errors import DomainError

    if (delivery_id is None) == (not all_dead):
        fail("give a DELIVERY_ID or --all-dead", 2)
    settings = load_settings()

    async def run() -> tuple[list[str], list[str]]:
        done: list[str] = []
        refused: list[str] = []
        async with (
            opened(settings, application_name="paymanager:webhooks", max_size=1) as database,
            database.pool.acquire() as conn,
        ):
            if delivery_id is not None:
                ids = [delivery_id]
            else:
                ids = []
                before = None
                while len(ids) < REPLAY_ALL_MAX:
                    page = await list_deliveries(
                        conn, service, endpoint_id=endpoint, status="dead", before=before, limit=200
                    )
                    if not page:
                        break
                    ids += [d.id for d in page]
                    before = (page[-1].created_at, page[-1].id)
            for one in ids:
                try:
                    await replay_delivery(conn, None, one, system_clock())
                    done.append(one)
                except DomainError as exc:
                    refused.append(f"{one}: {exc.message}")
        return done, refused

    done, refused = run_async(run())
    for one in done:
        typer.echo(f"replayed {one}")
    for line in refused:
        typer.echo(f"refused {line}", err=True)
    if refused:
        raise typer.Exit(1)
    if not done:
        typer.echo("nothing to replay")


def register(app: typer.Typer) -> None:
    app.add_typer(webhooks_app, name="webhooks")
