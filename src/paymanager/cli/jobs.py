"""`paymanager jobs ...`: migrate, list, inspect, retry, replay, cancel, change, promote, remove,
drain, obliterate, pause/resume, limits, waiting events, prune, stats."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Annotated, Any, TypeVar

import orjson
import typer

from paymanager.application.admin import use_cases as ops
from paymanager.jobs import JobState, Retention, admin

T = TypeVar("T")

jobs_app = typer.Typer(name="jobs", help="Inspect and administer the job engine.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(jobs_app, name="jobs")


def _with_conn(action: Callable[[Any], Awaitable[T]]) -> T:
    from paymanager.cli._command import load_settings
    from paymanager.db.database import opened

    settings = load_settings()

    async def run() -> T:
        async with (
            opened(settings, application_name="paymanager:cli-jobs", max_size=1) as database,
            database.pool.acquire() as conn,
        ):
            return await action(conn)

    try:
        return asyncio.run(run())
    except (ValueError, admin.QueueBusyError) as exc:
        # What the admin API refuses (a bad queue name, a job id out of range): a message, exit 2.
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def _asdict(value: Any) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(value)


def _echo_json(value: Any) -> None:
    typer.echo(orjson.dumps(value, default=str, option=orjson.OPT_INDENT_2).decode())


@jobs_app.command()
def migrate() -> None:
    """Install or update the job engine's tables alone (no ledger or payments tables): for a program
    that uses `paymanager.jobs` as a library on its own database. Idempotent."""
    from paymanager.cli import _migrate
    from paymanager.cli._command import load_settings

    applied = _migrate(load_settings(), job_engine_only=True, create_embedded=False)
    typer.echo("applied: " + ", ".join(applied) if applied else "the job engine's schema is current")


@jobs_app.command("ls")
def list_jobs(
    state: Annotated[JobState | None, typer.Option(help="Only jobs in this state.")] = None,
    queue: Annotated[str | None, typer.Option(help="Only jobs of this queue.")] = None,
    kind: Annotated[str | None, typer.Option(help="Only jobs of this kind.")] = None,
    before_id: Annotated[int | None, typer.Option(help="Page: jobs older than this id.")] = None,
    intent: Annotated[str | None, typer.Option(help="Only the jobs of this intent (its id).")] = None,
    limit: Annotated[int, typer.Option(min=1, max=admin.LIST_LIMIT_MAX)] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="JSON lines, one job each.")] = False,
) -> None:
    """List jobs, newest first, with a header: `paymanager jobs ls --state dead --queue outbox`."""
    intent_id = _intent_id(intent) if intent is not None else None
    where = ops.JobFilter(state=state, queue=queue, kind=kind, intent_id=intent_id, before_id=before_id)
    rows = _with_conn(lambda c: ops.list_jobs(c, where, limit=limit))
    if as_json:
        for row in rows:
            typer.echo(orjson.dumps(row, default=str).decode())
        return
    if not rows:
        typer.echo("no jobs")
        return
    header = f"{'ID':>10}  {'STATE':<16} {'QUEUE':<14} {'KIND':<24} {'ATTEMPT':<8} {'RUN AT (UTC)':<19}"
    typer.echo(f"{header}  LAST ERROR")
    for row in rows:
        error = (row["last_error"] or {}).get("error", "")  # type: ignore[attr-defined]
        run_at = row["run_at"].strftime("%Y-%m-%d %H:%M:%S") if row["run_at"] else "-"  # type: ignore[attr-defined]
        attempt = f"{row['attempt']}/{row['max_attempts'] or '-'}"
        typer.echo(
            f"{row['id']:>10}  {row['state']:<16} {row['queue']:<14} {row['kind']:<24} {attempt:<8} "
            f"{run_at:<19}  {str(error)[:60]}"
        )


def _intent_id(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        typer.echo(f"error: --intent {text!r} is not an intent id (a UUID)", err=True)
        raise typer.Exit(2) from None


@jobs_app.command()
def show(
    job_id: int,
    as_json: Annotated[
        bool, typer.Option("--json", help="Compact, on one line (default: indented).")
    ] = False,
) -> None:
    """Every field of one job as JSON, its error history included."""
    row = _with_conn(lambda c: admin.get_job(c, job_id))
    if row is None:
        typer.echo(f"job {job_id} not found", err=True)
        raise typer.Exit(1)
    if as_json:
        typer.echo(orjson.dumps(row, default=str).decode())
        return
    _echo_json(row)


@jobs_app.command()
def retry(job_id: int) -> None:
    """Run a dead, cancelled, retryable or scheduled job now."""
    if not _with_conn(lambda c: ops.retry_job(c, ops.Actor.cli(), job_id)):
        typer.echo(f"job {job_id} is not dead, cancelled, retryable or scheduled", err=True)
        raise typer.Exit(1)
    typer.echo(f"job {job_id} is available")


@jobs_app.command()
def replay(
    job_id: Annotated[int | None, typer.Argument(help="One dead job; omit to replay by filter.")] = None,
    kind: Annotated[str | None, typer.Option()] = None,
    queue: Annotated[str | None, typer.Option()] = None,
    error: Annotated[str | None, typer.Option(help="Only jobs whose last error contains this.")] = None,
    since: Annotated[datetime | None, typer.Option(help="Dead since (ISO time).")] = None,
    until: Annotated[datetime | None, typer.Option(help="Dead before (ISO time).")] = None,
    limit: Annotated[int, typer.Option(min=1, max=admin.REPLAY_LIMIT_MAX)] = 1_000,
    replay_all: Annotated[bool, typer.Option("--all", help="Replay every dead job (no filter).")] = False,
) -> None:
    """Replay dead jobs: one by id, or all that match every filter given (`--all` for every one)."""
    if job_id is not None:
        retry(job_id)
        return
    where = ops.ReplayFilter(kind=kind, queue=queue, error_contains=error, since=since, until=until)
    if where.empty and not replay_all:
        typer.echo("error: give a filter (--kind, --queue, --error, --since, --until) or --all", err=True)
        raise typer.Exit(2)
    ids = _with_conn(lambda c: ops.replay_dead(c, ops.Actor.cli(), where, replay_all=replay_all, limit=limit))
    typer.echo(f"replayed {len(ids)} dead job(s)")


@jobs_app.command()
def cancel(job_id: int) -> None:
    """Cancel a job; a running one is asked to stop through its context."""
    result = _with_conn(lambda c: ops.cancel_job(c, ops.Actor.cli(), job_id))
    if result is None:
        typer.echo(f"job {job_id} is finished or does not exist", err=True)
        raise typer.Exit(1)
    typer.echo(f"job {job_id}: {result.outcome}")


@jobs_app.command()
def change(
    job_id: int,
    payload: Annotated[str | None, typer.Option(help="The new payload, a JSON object.")] = None,
    priority: Annotated[int | None, typer.Option(help="The new priority (lower runs first).")] = None,
    delay_ms: Annotated[int | None, typer.Option(help="Run this many ms from now (0: at once).")] = None,
) -> None:
    """Change a job that has not started: its payload, priority or delay."""
    data: dict[str, Any] | None = None
    if payload is not None:
        try:
            data = orjson.loads(payload)
        except orjson.JSONDecodeError:
            data = None
        if not isinstance(data, dict):
            typer.echo("error: --payload must be a JSON object", err=True)
            raise typer.Exit(2)
    state = _with_conn(
        lambda c: admin.change_job(c, job_id, payload=data, priority=priority, delay_ms=delay_ms)
    )
    if state is None:
        typer.echo(f"job {job_id} has started, finished or does not exist", err=True)
        raise typer.Exit(1)
    typer.echo(f"job {job_id} changed ({state})")


@jobs_app.command()
def promote(job_id: int) -> None:
    """Run a scheduled (delayed) or retryable job now, its attempts unchanged."""
    if not _with_conn(lambda c: admin.promote_job(c, job_id)):
        typer.echo(f"job {job_id} is not scheduled or retryable", err=True)
        raise typer.Exit(1)
    typer.echo(f"job {job_id} is available")


@jobs_app.command()
def remove(job_id: int) -> None:
    """Delete a job that is not running."""
    if not _with_conn(lambda c: admin.remove_job(c, job_id)):
        typer.echo(f"job {job_id} is running or does not exist", err=True)
        raise typer.Exit(1)
    typer.echo(f"job {job_id} removed")


def _confirm(what: str, yes: bool) -> None:
    # A destructive command asks first; --yes answers for scripts.
    if not yes and not typer.confirm(what, default=False):
        typer.echo("nothing done", err=True)
        raise typer.Exit(1)


@jobs_app.command()
def drain(
    queue: str,
    keep_delayed: Annotated[bool, typer.Option(help="Keep scheduled and retryable jobs.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete the jobs of a queue waiting to run (running and finished jobs stay)."""
    _confirm(f"Delete every waiting job of queue {queue}?", yes)
    n = _with_conn(lambda c: admin.drain_queue(c, queue, delayed=not keep_delayed))
    typer.echo(f"queue {queue}: drained {n} job(s)")


@jobs_app.command()
def obliterate(
    queue: str,
    force: Annotated[bool, typer.Option(help="Delete running jobs too.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete a queue: every job of it, its history included, and its settings."""
    _confirm(f"Delete queue {queue}, every job of it and its history?", yes)
    n = _with_conn(lambda c: admin.obliterate_queue(c, queue, force=force))
    typer.echo(f"queue {queue}: obliterated ({n} job(s) deleted)")


@jobs_app.command()
def pause(queue: str) -> None:
    """Stop claiming jobs of a queue (running jobs finish)."""
    _with_conn(lambda c: ops.pause_queue(c, ops.Actor.cli(), queue))
    typer.echo(f"queue {queue} paused")


@jobs_app.command()
def resume(queue: str) -> None:
    """Resume claiming jobs of a paused queue."""
    _with_conn(lambda c: ops.resume_queue(c, ops.Actor.cli(), queue))
    typer.echo(f"queue {queue} resumed")


@jobs_app.command("max-depth")
def max_depth(queue: str, depth: Annotated[int, typer.Argument(help="0 removes the limit.", min=0)]) -> None:
    """Refuse enqueues once a queue holds this many unfinished jobs."""
    _with_conn(lambda c: ops.set_max_depth(c, ops.Actor.cli(), queue, depth or None))
    typer.echo(f"queue {queue}: max depth {depth or 'unlimited'}")


@jobs_app.command("rate-limit")
def rate_limit(
    queue: str,
    limit: Annotated[str, typer.Argument(help="N/WINDOW: 100/1s, 5/500ms, 600/1m; `off` removes it.")],
) -> None:
    """Start at most N jobs of a queue per window, over every process."""
    try:
        parsed = admin.parse_rate_limit(limit)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    max_jobs, window_ms = parsed if parsed is not None else (None, 1_000)
    _with_conn(lambda c: admin.set_rate_limit(c, queue, max_jobs=max_jobs, window_ms=window_ms))
    shown = admin.format_rate_limit(max_jobs, window_ms) if max_jobs is not None else "off"
    typer.echo(f"queue {queue}: rate limit {shown}")


@jobs_app.command()
def concurrency(
    queue: str, limit: Annotated[str, typer.Argument(help="Most jobs running at once; `off` removes it.")]
) -> None:
    """Run at most N jobs of a queue at once over every process (beside each worker's own limit)."""
    value: int | None = None
    if limit.strip().lower() != "off":
        if not limit.strip().isdigit():
            typer.echo(f"error: concurrency {limit!r} must be a number or off", err=True)
            raise typer.Exit(2)
        value = int(limit)
    _with_conn(lambda c: admin.set_global_concurrency(c, queue, value))
    typer.echo(f"queue {queue}: global concurrency {value if value is not None else 'off'}")


@jobs_app.command("waiting-events")
def waiting_events(
    queue: str, setting: Annotated[str, typer.Argument(help="`on` or `off`.", metavar="on|off")]
) -> None:
    """Publish (or stop publishing) a `waiting` event for each job of a queue that becomes available."""
    value = setting.strip().lower()
    if value not in ("on", "off"):
        typer.echo(f"error: waiting events {setting!r} must be on or off", err=True)
        raise typer.Exit(2)
    _with_conn(lambda c: admin.set_waiting_events(c, queue, value == "on"))
    typer.echo(f"queue {queue}: waiting events {value}")


@jobs_app.command()
def prune(
    completed_age_ms: Annotated[int | None, typer.Option(min=0)] = None,
    completed_count: Annotated[int | None, typer.Option(min=0)] = None,
    dead_age_ms: Annotated[int | None, typer.Option(min=0)] = None,
    dead_count: Annotated[int | None, typer.Option(min=0)] = None,
) -> None:
    """Delete finished jobs beyond the configured retention (or the limits given here)."""
    from paymanager.cli._command import load_settings

    settings = load_settings()
    retention = Retention(
        completed_age_ms=completed_age_ms
        if completed_age_ms is not None
        else settings.job_retention_completed_age_ms,
        completed_count=completed_count
        if completed_count is not None
        else settings.job_retention_completed_count,
        dead_age_ms=dead_age_ms if dead_age_ms is not None else settings.job_retention_dead_age_ms,
        dead_count=dead_count,
    )
    deleted = _with_conn(lambda c: admin.prune(c, retention))
    typer.echo(f"pruned {deleted} job(s)")


@jobs_app.command()
def stats(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per queue.")] = False,
) -> None:
    """Job counts per queue and state, and each queue's settings."""
    if as_json:
        for view in _with_conn(ops.queues):
            typer.echo(orjson.dumps({**_asdict(view), "depth": view.depth}).decode())
        return
    counts = _with_conn(admin.stats)
    queues = {q.name: q for q in _with_conn(admin.list_queues)}
    for queue in sorted(set(counts) | set(queues)):
        settings = queues.get(queue)
        flags = _queue_flags(settings) if settings is not None else ""
        per_state = "  ".join(f"{state}={n}" for state, n in sorted(counts.get(queue, {}).items()))
        typer.echo(f"{queue}{flags}: {per_state or 'empty'}")


def _queue_flags(settings: admin.QueueSettings) -> str:
    """A queue's settings as ` (paused, rate 100/1s, concurrency 5, waiting events)`, or nothing."""
    flags: list[str] = []
    if settings.paused:
        flags.append("paused")
    if settings.rate_max is not None and settings.rate_window_ms is not None:
        flags.append(f"rate {admin.format_rate_limit(settings.rate_max, settings.rate_window_ms)}")
    if settings.concurrency_max is not None:
        flags.append(f"concurrency {settings.concurrency_max}")
    if settings.rate_paused_until is not None:
        flags.append(f"rate-limited until {settings.rate_paused_until.isoformat()}")
    if settings.max_depth is not None:
        flags.append(f"max depth {settings.max_depth}")
    if settings.waiting_events:
        flags.append("waiting events")
    return f" ({', '.join(flags)})" if flags else ""
