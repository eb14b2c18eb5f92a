"""The `paymanager` command: run, migrate, config, health, and the component command groups."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Coroutine
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from pydantic import ValidationError

from paymanager.config import Settings, settings_markdown_table
from paymanager.roles import UnknownRoleError, parse_roles

app = typer.Typer(
    name="paymanager",
    help="Payment orchestration: API, settlement, PSP transfers and sweeps on one job engine and ledger.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

EXIT_CONFIG = 2
T = TypeVar("T")


def fail(message: str, code: int = 1) -> NoReturn:
    typer.echo(message, err=True)
    raise typer.Exit(code)


def load_settings() -> Settings:
    """Settings from the environment; a bad value exits 2 with a message a person can act on."""
    try:
        # Parse the roles first so a typo gets its own message rather than pydantic's wrapping.
        parse_roles(os.environ.get("WORKER_ROLES"))
        return Settings()
    except UnknownRoleError as exc:
        fail(str(exc), EXIT_CONFIG)
    except ValidationError as exc:
        lines = ["invalid configuration:"]
        for err in exc.errors():
            where = ".".join(str(part) for part in err["loc"]).upper() or "settings"
            message = str(err["msg"]).removeprefix("Value error, ")
            lines.append(f"  {where}: {message}")
        fail("\n".join(lines), EXIT_CONFIG)


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on uvloop where it is installed (about 30% more round trips per second with
    asyncpg on this machine: bench/driver.py --loop), else on the standard event loop."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - Windows
        return asyncio.run(coro)
    return uvloop.run(coro)


@app.command()
def run(
    migrate: Annotated[bool, typer.Option(help="Apply pending migrations before starting.")] = False,
    demo: Annotated[
        bool, typer.Option(help="Once started, move money through the API with a progress display.")
    ] = False,
    demo_intents: Annotated[int, typer.Option(min=1, max=100_000, help="p2p intents of the demo.")] = 300,
) -> None:
    """Start paymanager with the roles of WORKER_ROLES."""
    from paymanager.logging import configure_logging, get_logger
    from paymanager.roles import describe
    from paymanager.runtime import Runtime, StartupError, process_id, resolve_database_url

    settings = load_settings()
    # The demo draws a progress display: keep routine log lines out of it unless LOG_LEVEL asks.
    level = "warning" if demo and "LOG_LEVEL" not in os.environ else settings.log_level
    configure_logging(level, settings.log_format, process=process_id(), roles=describe(settings.worker_roles))
    log = get_logger("paymanager")
    if migrate:
        _migrate(resolve_database_url(settings))
    runtime = Runtime(settings)
    after_start = None
    if demo:
        from paymanager.cli.demo import demo_in_runtime

        async def after_start(rt: Runtime) -> None:
            await demo_in_runtime(rt, accounts=10, intents=demo_intents, concurrency=16)

    try:
        run_async(runtime.run(after_start))
    except StartupError as exc:
        log.error("start-up failed", step=exc.step, error=str(exc.__cause__ or exc))
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        pass


def _migrate(dsn: str) -> list[str]:
    from paymanager.db import migrations
    from paymanager.db.pool import connect

    async def apply() -> list[str]:
        conn = await connect(dsn, application_name="paymanager:migrate")
        try:
            applied = await migrations.migrate(conn)
        finally:
            await conn.close()
        return [f"{m.version:04d}_{m.name}" for m in applied]

    return run_async(apply())


@app.command()
def migrate() -> None:
    """Apply every pending database migration (safe to run from many processes at once)."""
    from paymanager.runtime import resolve_database_url

    settings = load_settings()
    applied = _migrate(resolve_database_url(settings))
    typer.echo("applied: " + ", ".join(applied) if applied else "the schema is current")


@app.command()
def config(
    markdown: Annotated[bool, typer.Option(help="Print the table of every variable instead.")] = False,
) -> None:
    """Print the effective configuration, secrets masked."""
    if markdown:
        typer.echo(settings_markdown_table())
        return
    settings = load_settings()
    width = max(len(name) for name in settings.public_view())
    for name, value in settings.public_view().items():
        typer.echo(f"{name.ljust(width)}  {value}")


@app.command()
def health() -> None:
    """Exec probe: exit 0 while a paymanager process on this host runs with a fresh heartbeat, else 1."""
    from paymanager.health import check_local_processes
    from paymanager.runtime import resolve_database_url

    settings = load_settings()
    try:
        ok, message = run_async(
            check_local_processes(resolve_database_url(settings), settings.process_heartbeat_stale_ms)
        )
    except Exception as exc:
        fail(f"unhealthy: {exc}", 1)
    typer.echo(message)
    raise typer.Exit(0 if ok else 1)


def _register_groups() -> None:
    """Command groups of the components (jobs, ledger, services, ...) register themselves here."""
    import importlib
    import pkgutil

    import paymanager.cli as package

    for module in pkgutil.iter_modules(package.__path__):
        if module.name.startswith("_"):
            continue
        loaded = importlib.import_module(f"paymanager.cli.{module.name}")
        register = getattr(loaded, "register", None)
        if register is not None:
            register(app)


_register_groups()


def main() -> None:  # pragma: no cover - console entry point
    """Run the CLI; what a command could not do is a message and an exit code, never a traceback:
    2 for input refused (by our checks or the schema's), 1 for a database missing or unmigrated."""
    import asyncpg

    try:
        sys.exit(app())
    except (ValueError, asyncpg.CheckViolationError, asyncpg.DataError) as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except BrokenPipeError:
        sys.exit(1)  # the output's reader went away (`| head`): nothing to say
    except asyncpg.UndefinedTableError:
        typer.echo("error: the database has no paymanager schema; run `paymanager migrate`", err=True)
        sys.exit(1)
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        typer.echo(f"error: cannot use the database: {exc}", err=True)
        sys.exit(1)
