"""`paymanager sandbox psp`: the sandbox PSPs (IPPS, QP and Wise dialects) on one HTTP port."""

from __future__ import annotations

from typing import Annotated

import typer

sandbox_app = typer.Typer(help="Sandbox partners for development and tests.", no_args_is_help=True)


@sandbox_app.command("psp")
def psp(
    port: Annotated[int, typer.Option(min=1, max=65_535, help="Port to listen on.")] = 8090,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    seed: Annotated[int | None, typer.Option(help="Seed of the fault dice, for a repeatable run.")] = None,
) -> None:
    """Serve the sandbox PSPs until interrupted; faults are set with POST /admin/faults."""
    from paymanager.sandbox.psp import serve

    typer.echo(f"sandbox PSPs (ipps, qp, wise) on http://{host}:{port}; faults: POST /admin/faults", err=True)
    serve(host, port, seed=seed)


def register(app: typer.Typer) -> None:
    app.add_typer(sandbox_app, name="sandbox")
