"""The `paymanager` command: run, migrate, config, health, and the component command groups."""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from paymanager.cli._command import EXIT_CONFIG, fail, load_settings, run_async
from paymanager.config import Settings, settings_markdown_table

if TYPE_CHECKING:
    from paymanager.db.migrations import MigrationStatus

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
    from paymanager import tracing
    from paymanager.bootstrap import Components
    from paymanager.logging import configure_logging, get_logger
    from paymanager.roles import describe
    from paymanager.runtime import Runtime, StartupError, process_id

    settings = load_settings()
    try:
        # Before the logs: their processor chain includes the trace ids when tracing is on.
        tracing.configure(settings)
    except tracing.TracingUnavailableError as exc:
        fail(f"error: {exc}", EXIT_CONFIG)
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
        from paymanager.db.migrations import ChangedMigrationError

        # A changed migration file is a build to fix, not an outage to wait out: the config exit code.
        raise typer.Exit(EXIT_CONFIG if isinstance(exc.__cause__, ChangedMigrationError) else 1) from None
    except KeyboardInterrupt:
        pass
    finally:
        tracing.shutdown()  # exports the spans still buffered


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

    try:
        return run_async(apply())
    except migrations.ChangedMigrationError as exc:
        fail(f"error: {exc}", EXIT_CONFIG)


@app.command()
def migrate(
    status: Annotated[
        bool, typer.Option("--status", help="List every migration, applied or pending, with checksums.")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the migrations that would run; change nothing.")
    ] = False,
    wait: Annotated[
        float | None,
        typer.Option(
            "--wait",
            min=0,
            max=86_400,
            metavar="SECONDS",
            help="Apply nothing: wait until another process has migrated the schema this code needs "
            "(exit 0), at most SECONDS (then exit 1). Kubernetes init containers use it.",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="With --status or --dry-run: JSON.")] = False,
) -> None:
    """Apply every pending database migration (safe to run from many processes at once).

    Examples: `paymanager migrate`, `paymanager migrate --status`, `paymanager migrate --dry-run`,
    `paymanager migrate --wait 600`.
    """
    settings = load_settings()
    if sum([status, dry_run, wait is not None]) > 1:
        fail("error: give one of --status, --dry-run and --wait", EXIT_CONFIG)
    if wait is not None:
        _wait_for_schema(settings, wait)
        return
    if status or dry_run:
        _migration_report(settings, dry_run=dry_run, as_json=as_json)
        return
    applied = _migrate(settings)
    if as_json:
        typer.echo(json.dumps({"applied": applied}))
        return
    typer.echo("applied: " + ", ".join(applied) if applied else "the schema is current")


# How often `migrate --wait` looks again: a migration Job takes seconds to minutes.
SCHEMA_POLL_S = 1.0


def _wait_for_schema(settings: Settings, timeout_s: float) -> None:
    """`migrate --wait`: return once the schema has every migration this code ships. A database not
    reachable yet counts as not migrated yet (the init container may start before PostgreSQL); a
    changed migration file exits 2 at once, since waiting cannot fix it."""
    import asyncio
    import time

    import asyncpg

    from paymanager.db import migrations
    from paymanager.db.database import NoDatabaseError, opened

    async def wait() -> str:
        deadline = time.monotonic() + timeout_s
        last = "not checked yet"
        while True:
            try:
                async with (
                    opened(settings, application_name="paymanager:migrate-wait", max_size=1) as db,
                    db.pool.acquire() as conn,
                ):
                    await migrations.check_schema(conn)
                return ""
            except migrations.SchemaOutdatedError as exc:
                last = f"missing {', '.join(m.file_name for m in exc.missing)}"
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, NoDatabaseError) as exc:
                last = f"database not reachable: {exc}"
            if time.monotonic() >= deadline:
                return last
            await asyncio.sleep(SCHEMA_POLL_S)

    try:
        still = run_async(wait())
    except migrations.ChangedMigrationError as exc:
        fail(f"error: {exc}", EXIT_CONFIG)
    if still:
        fail(f"error: the schema is not current after {timeout_s:g} s ({still})", 1)
    typer.echo("the schema is current")


def _migration_report(settings: Settings, *, dry_run: bool, as_json: bool) -> None:
    """`migrate --status` / `--dry-run`: read the version table, change nothing (and create no
    embedded database: a report on an empty one would be about a database nobody uses)."""
    from paymanager.db import migrations
    from paymanager.db.database import opened

    async def read() -> list[MigrationStatus]:
        async with (
            opened(settings, application_name="paymanager:migrate", max_size=1) as database,
            database.pool.acquire() as conn,
        ):
            return await migrations.migration_status(conn)

    report = run_async(read())
    if dry_run:
        pending = [row for row in report if row.state == "pending"]
        if as_json:
            typer.echo(json.dumps({"would_apply": [_migration_json(row) for row in pending]}))
            return
        if not pending:
            typer.echo("nothing to apply: the schema is current")
        for row in pending:
            typer.echo(f"would apply {row.version:04d}_{row.name}  sha256:{row.file_checksum}")
        _refusal_note(report)
        return
    if as_json:
        typer.echo(json.dumps({"migrations": [_migration_json(row) for row in report]}))
        return
    typer.echo(f"{'VERSION':<8} {'NAME':<32} {'STATE':<10} {'APPLIED AT':<25} CHECKSUM")
    for row in report:
        applied_at = row.applied_at.isoformat(timespec="seconds") if row.applied_at else "-"
        checksum = row.applied_checksum or row.file_checksum or "-"
        typer.echo(f"{row.version:04d}     {row.name:<32} {row.state:<10} {applied_at:<25} {checksum}")
        if row.state == "changed":
            typer.echo(f"         file now sha256:{row.file_checksum}")
    waiting = sum(1 for row in report if row.state == "pending")
    typer.echo(f"{sum(1 for row in report if row.applied_at)} applied, {waiting} pending")
    _refusal_note(report)


def _refusal_note(report: list[MigrationStatus]) -> None:
    changed = [f"{row.version:04d}_{row.name}.sql" for row in report if row.state == "changed"]
    if changed:
        typer.echo(
            f"note: changed since applied: {', '.join(changed)}; `paymanager migrate` and start-up refuse",
            err=True,
        )


def _migration_json(row: MigrationStatus) -> dict[str, Any]:
    return {
        "version": row.version,
        "name": row.name,
        "state": row.state,
        "file_checksum": row.file_checksum,
        "applied_checksum": row.applied_checksum,
        "applied_at": row.applied_at.isoformat() if row.applied_at else None,
    }


@app.command()
def config(
    markdown: Annotated[bool, typer.Option(help="Print the table of every variable instead.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object of NAME: value.")] = False,
) -> None:
    """Print the effective configuration, secrets masked."""
    if markdown:
        typer.echo(settings_markdown_table())
        return
    settings = load_settings()
    if as_json:
        typer.echo(json.dumps(settings.public_view(), default=str))
        return
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
