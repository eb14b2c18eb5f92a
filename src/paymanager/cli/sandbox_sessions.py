"""`paymanager sandbox giftcard` and `paymanager sandbox card`: the session providers' sandboxes.

The `sandbox` group may already exist (the PSP and merchant sandboxes register it in
`cli/sandbox.py`, which the CLI loads first, in name order); these commands join it, or create it.
"""

from __future__ import annotations

from typing import Annotated

import typer

HOST_HELP = "Interface to listen on."


def _sandbox_group(app: typer.Typer) -> typer.Typer:
    for group in app.registered_groups:
        if group.name == "sandbox" and group.typer_instance is not None:
            return group.typer_instance
    group_app = typer.Typer(
        help="HTTP simulators of the providers, with fault injection.", no_args_is_help=True
    )
    app.add_typer(group_app, name="sandbox")
    return group_app


def giftcard(
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8091,
    host: Annotated[str, typer.Option(help=HOST_HELP)] = "127.0.0.1",
) -> None:
    """Serve the Titreo gift-card sandbox (balance, debit, cancel; faults at /_sandbox/faults)."""
    from paymanager.sandbox._provider_sim import serve
    from paymanager.sandbox.giftcard import create_app

    typer.echo(f"gift-card sandbox on http://{host}:{port}")
    serve(create_app(), host, port)


def card(
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8092,
    host: Annotated[str, typer.Option(help=HOST_HELP)] = "127.0.0.1",
) -> None:
    """Serve the card-acquirer sandbox (authorize, capture, release; faults at /_sandbox/faults)."""
    from paymanager.sandbox._provider_sim import serve
    from paymanager.sandbox.card import create_app

    typer.echo(f"card sandbox on http://{host}:{port}")
    serve(create_app(), host, port)


def register(app: typer.Typer) -> None:
    group = _sandbox_group(app)
    group.command("giftcard")(giftcard)
    group.command("card")(card)
