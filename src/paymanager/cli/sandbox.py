"""`paymanager sandbox`: HTTP simulators of the outside parties paymanager talks to.

Each simulator is a command of this group (`psp`, `merchant`), serving real HTTP until Ctrl-C.
"""

from __future__ import annotations

from typing import Annotated

import typer

sandbox_app = typer.Typer(
    help="HTTP simulators: the PSPs (IPPS, QP, Wise) and a merchant's webhook receiver.", no_args_is_help=True
)


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


@sandbox_app.command("merchant")
def merchant(
    port: Annotated[int, typer.Option(help="Port to listen on (0: a free one).")] = 8099,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    secret: Annotated[
        list[str] | None, typer.Option(help="Endpoint secret to verify with (repeat during a rotation).")
    ] = None,
    mode: Annotated[str, typer.Option(help="How to answer: ok, fail (500), hang, gone (410).")] = "ok",
    tolerance_sec: Annotated[int, typer.Option(help="Signature timestamp tolerance.")] = 300,
    delay_ms: Annotated[int, typer.Option(min=0, max=600_000, help="Answer this much later.")] = 0,
) -> None:
    """A webhook receiver that verifies signatures and answers as --mode says (per path at run time:
    POST /_control/paths). Received deliveries: GET /_control/received."""
    from paymanager.cli._command import fail, run_async
    from paymanager.sandbox.merchant import MODES, MerchantReceiver, serve_forever

    if mode not in MODES:
        fail(f"--mode must be one of {', '.join(MODES)}", 2)

    async def ready(url: str) -> None:
        typer.echo(f"merchant sandbox listening on {url} (mode {mode})", err=True)

    async def run() -> None:
        receiver = MerchantReceiver(mode=mode, secrets=list(secret or []), tolerance_sec=tolerance_sec)
        receiver.default.delay_ms = delay_ms
        await serve_forever(receiver, host, port, ready)

    run_async(run())


def register(app: typer.Typer) -> None:
    app.add_typer(sandbox_app, name="sandbox")
