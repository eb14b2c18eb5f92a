"""`paymanager psp`: PSP transactions (list, show, resolve a manual review) and PSP configurations."""

from __future__ import annotations

import getpass
import json
import socket
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from paymanager.cli._command import run_async

if TYPE_CHECKING:
    from paymanager.adapters.secret_box import SecretBox
    from paymanager.config import Settings

psp_app = typer.Typer(help="PSP payouts: transactions, manual review, configurations.", no_args_is_help=True)
config_app = typer.Typer(help="PSP configurations, stored sealed under PSP_CONFIG_KEK.", no_args_is_help=True)
psp_app.add_typer(config_app, name="config")


@psp_app.command("ls")
def ls(
    state: Annotated[str | None, typer.Option(help="Only this state, e.g. MANUAL_REVIEW.")] = None,
    psp: Annotated[str | None, typer.Option(help="Only this PSP.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=500)] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="JSON lines, one transaction each.")] = False,
) -> None:
    """List PSP transactions, newest first: `paymanager psp ls --state MANUAL_REVIEW`."""
    from paymanager.application.psp import review
    from paymanager.application.psp.payout import describe
    from paymanager.cli._command import fail, load_settings
    from paymanager.db.database import opened
    from paymanager.domain.errors import DomainError

    settings = load_settings()

    async def run() -> list[str]:
        async with (
            opened(settings, application_name="paymanager:psp", max_size=1) as database,
            database.pool.acquire() as conn,
        ):
            rows = await review.list_txs(conn, state=state, psp=psp, limit=limit)
        if as_json:
            return [json.dumps(row.view()) for row in rows]
        return [f"{describe(row)}  intent={row.intent_id}  attempts={row.attempts}" for row in rows]

    try:
        lines = run_async(run())
    except DomainError as exc:
        fail(exc.message, 2)
    for line in lines:
        typer.echo(line)


@psp_app.command("show")
def show(
    tx_id: Annotated[str, typer.Argument(help="The PSP transaction's id.")],
    as_json: Annotated[
        bool, typer.Option("--json", help="Compact, on one line (default: indented).")
    ] = False,
) -> None:
    """One PSP transaction as JSON (the account number masked)."""
    from paymanager.application.psp import review
    from paymanager.cli._command import fail, load_settings
    from paymanager.db.database import opened
    from paymanager.domain.errors import DomainError

    settings = load_settings()
    parsed = _uuid(tx_id)

    async def run() -> dict[str, object]:
        async with (
            opened(settings, application_name="paymanager:psp", max_size=1) as database,
            database.pool.acquire() as conn,
        ):
            return (await review.get_tx(conn, parsed)).view()

    try:
        typer.echo(json.dumps(run_async(run()), indent=None if as_json else 2))
    except DomainError as exc:
        fail(exc.message, 1)


@psp_app.command("resolve")
def resolve(
    tx_id: Annotated[str, typer.Argument(help="The PSP transaction's id (in MANUAL_REVIEW).")],
    completed: Annotated[
        str | None, typer.Option("--completed", help="The PSP's reference: it paid.")
    ] = None,
    failed: Annotated[str | None, typer.Option("--failed", help="Why it did not pay.")] = None,
) -> None:
    """Resolve a manual review: --completed REF posts the hold, --failed REASON voids it. Audited."""
    from paymanager.application.intents.events import Event
    from paymanager.application.intents.settle import publish
    from paymanager.cli._command import fail, load_settings
    from paymanager.db.database import opened
    from paymanager.domain.errors import DomainError

    settings = load_settings()
    parsed = _uuid(tx_id)
    if (completed is None) == (failed is None):
        fail("give exactly one of --completed REF or --failed REASON", 2)
    by = f"cli:{getpass.getuser()}@{socket.gethostname()}"

    async def run() -> dict[str, object]:
        from paymanager.application.admin import ops
        from paymanager.application.admin.use_cases import Actor
        from paymanager.bootstrap import build

        # The components of a process with no role: the ledger, channels and system accounts that a
        # settlement needs, no service started and no intent reconciled.
        headless = settings.model_copy(update={"worker_roles": frozenset()})
        async with opened(settings, application_name="paymanager:psp", max_size=2) as database:
            components = await build(headless, database, process_id=by, reconcile_intents=False)
            pending: list[Event] = []
            try:
                async with database.pool.acquire() as conn:
                    resolved = await ops.resolve_psp(
                        components.payments, conn, Actor.cli(), parsed, completed_ref=completed,
                        failed_reason=failed, pending=pending,
                    )  # fmt: skip
                for event in pending:
                    await publish(components.payments, event)
            finally:
                await components.close()
            return resolved.view()

    try:
        view = run_async(run())
    except DomainError as exc:
        fail(exc.message, 1)
    typer.echo(f"{view['id']} -> {view['state']} ({view['resolution']}) by {view['resolved_by']}")


@config_app.command("set")
def config_set(
    name: Annotated[str, typer.Argument(help="The PSP: ipps, qp or wise.")],
    file: Annotated[
        Path, typer.Option("--file", help="The PSP's configuration JSON (base_url, api_key, ...).")
    ],
) -> None:
    """Store a PSP's configuration sealed (AES-256-GCM under PSP_CONFIG_KEK); the file is not kept."""
    from paymanager.application.psp.config import set_config
    from paymanager.cli._command import fail, load_settings
    from paymanager.db.database import opened

    settings = load_settings()
    box = _box(settings)
    try:
        raw = file.read_bytes()
    except OSError as exc:
        fail(f"cannot read {file}: {exc.strerror}", 2)

    async def run() -> None:
        async with opened(settings, application_name="paymanager:psp", max_size=1) as database:
            await set_config(database.pool, box, name, raw)

    try:
        run_async(run())
    except ValueError as exc:
        fail(f"configuration refused: {exc}", 2)
    typer.echo(f"configuration of {name} stored, sealed with key {box.current_key_id}")


@config_app.command("reseal")
def config_reseal() -> None:
    """Seal every PSP configuration again under the current PSP_CONFIG_KEK (after a rotation)."""
    from paymanager.application.psp.config import reseal_all
    from paymanager.cli._command import load_settings
    from paymanager.db.database import opened

    settings = load_settings()
    box = _box(settings)

    async def run() -> list[str]:
        async with opened(settings, application_name="paymanager:psp", max_size=1) as database:
            return await reseal_all(database.pool, box)

    done = run_async(run())
    typer.echo(f"resealed with key {box.current_key_id}: {', '.join(done) or '(none)'}")


def _box(settings: Settings) -> SecretBox:
    from paymanager.adapters.secret_box import SecretBox

    kek = settings.psp_config_kek
    previous = settings.psp_config_kek_previous
    return SecretBox.from_config(
        kek.get_secret_value() if kek else None, previous.get_secret_value() if previous else None
    )


def _uuid(text: str) -> uuid.UUID:
    from paymanager.cli._command import fail

    try:
        return uuid.UUID(text)
    except ValueError:
        fail(f"not a transaction id: {text!r}", 2)


def register(app: typer.Typer) -> None:
    app.add_typer(psp_app, name="psp")
