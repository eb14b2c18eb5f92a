"""The `paymanager` command: run, migrate, config, health, and the component command groups."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from paymanager.cli._command import fail, load_settings, run_async
from paymanager.config import Settings, settings_markdown_table

app = typer.Typer(
    name="paymanager",
    help="Payment orchestration: API, settlement, PSP transfers and sweeps on one job engine and ledger.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


@app.command()
def run(
    migrate: Annotated[bool, typer.Option(help="Apply pending migrations before starting.")] = False,
    demo: Annotated[
        bool, typer.Option(help="Once started, move money through the API with a progress display.")
    ] = False,
    demo_intents: Annotated[int, typer.Option(min=1, max=100_000, help="p2p intents of the demo.")] = 300,
    sandbox_psp: Annotated[
        bool,
        typer.Option(
            help="Serve the sandbox PSPs in this process and configure every PSP of PSP_NAMES that has no "
            "configuration to use them (implied by --demo when the roles include psp-worker)."
        ),
    ] = False,
) -> None:
    """Start paymanager with the roles of WORKER_ROLES."""
    from paymanager.bootstrap import Components
    from paymanager.logging import configure_logging, get_logger
    from paymanager.roles import describe
    from paymanager.runtime import Runtime, StartupError, process_id

    settings = load_settings()
    # The demo draws a progress display: keep routine log lines out of it unless LOG_LEVEL asks.
    level = "warning" if demo and "LOG_LEVEL" not in os.environ else settings.log_level
    configure_logging(level, settings.log_format, process=process_id(), roles=describe(settings.worker_roles))
    log = get_logger("paymanager")
    if migrate:
        _migrate(settings)
    from paymanager.roles import Role

    if (sandbox_psp or demo) and Role.PSP_WORKER in settings.worker_roles:
        _serve_sandbox_psps(settings)
    runtime = Runtime(settings)
    after_start = None
    if demo:
        from paymanager.cli.demo import demo_in_runtime

        async def after_start(components: Components) -> None:
            await demo_in_runtime(components, accounts=10, intents=demo_intents, concurrency=16)

    try:
        run_async(runtime.run(after_start))
    except StartupError as exc:
        log.error("start-up failed", step=exc.step, error=str(exc.__cause__ or exc))
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        pass


def _serve_sandbox_psps(settings: Settings) -> None:
    """Start the sandbox PSPs on a free port and point every unconfigured PSP of PSP_NAMES at them."""
    from paymanager.adapters.secret_box import SecretBox
    from paymanager.application.psp.config import open_config, set_config
    from paymanager.db.database import opened
    from paymanager.logging import get_logger
    from paymanager.sandbox.psp import SandboxState, config_for, start_in_thread

    url, server = start_in_thread()
    state: SandboxState = server.config.app.state.sandbox
    kek = settings.psp_config_kek.get_secret_value() if settings.psp_config_kek else None
    previous = (
        settings.psp_config_kek_previous.get_secret_value() if settings.psp_config_kek_previous else None
    )
    box = SecretBox.from_config(kek, previous)

    async def configure() -> list[str]:
        import json

        done = []
        async with opened(settings, application_name="paymanager:sandbox", max_size=1) as database:
            for name in settings.psp_names:
                if await open_config(database.pool, box, name) is None:
                    await set_config(
                        database.pool, box, name, json.dumps(config_for(name, url, state)).encode()
                    )
                    done.append(name)
        return done

    configured = run_async(configure())
    get_logger("paymanager").info("sandbox PSPs serving", url=url, configured=configured)


def _migrate(settings: Settings, *, job_engine_only: bool = False, create_embedded: bool = True) -> list[str]:
    """Apply the pending migrations (the job engine's alone with `job_engine_only`). Without
    DATABASE_URL the database is the embedded one of EMBEDDED_PG_DIR, resolved from the current
    directory, and said so on stderr: a migration never lands somewhere the caller did not see."""
    from pathlib import Path

    from paymanager.db import migrations
    from paymanager.db.database import opened

    where = Path(settings.embedded_pg_dir).resolve()
    if settings.database_url is None and (create_embedded or where.exists()):
        typer.echo(f"DATABASE_URL is unset: migrating the embedded database in {where}", err=True)

    async def apply() -> list[str]:
        # A dedicated connection: the migration lock is a session advisory lock.
        async with opened(
            settings, application_name="paymanager:migrate", max_size=1, create_embedded=create_embedded
        ) as database:
            conn = await database.connect()
            try:
                if job_engine_only:
                    applied = await migrations.migrate_job_engine(conn)
                else:
                    applied = await migrations.migrate(conn)
            finally:
                await conn.close()
        return [f"{m.version:04d}_{m.name}" for m in applied]

    return run_async(apply())


@app.command()
def migrate() -> None:
    """Apply every pending database migration (safe to run from many processes at once)."""
    settings = load_settings()
    applied = _migrate(settings)
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
    from paymanager.db.database import opened
    from paymanager.health import check_local_processes

    settings = load_settings()

    async def check() -> tuple[bool, str]:
        async with opened(settings, application_name="paymanager:health", max_size=1) as database:
            return await check_local_processes(database, settings.process_heartbeat_stale_ms)

    try:
        ok, message = run_async(check())
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
