"""The storage upkeep: a warning at start when autovacuum leaves a churning table, the VACUUM of those
tables, and history partitions created ahead, each duty once per interval over all processes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg
from structlog.testing import capture_logs

from paymanager.application.storage.store import CHURN_TABLES
from paymanager.application.storage.upkeep import StorageUpkeep
from paymanager.config import Settings
from tests.integration.payments.conftest import build_components
from tests.support.waiting import wait_until

WARNING = "autovacuum is off for tables whose rows churn"


async def _uncovered(pool: asyncpg.Pool) -> list[str]:
    """The churning tables autovacuum leaves alone: all when the server's is off, else the disabled."""
    if not await pool.fetchval("SELECT current_setting('autovacuum')::boolean"):
        return sorted(CHURN_TABLES)
    return ["request_signature"]


async def _vacuum_counts(pool: asyncpg.Pool) -> dict[str, int]:
    rows = await pool.fetch(
        "SELECT relname, vacuum_count FROM pg_stat_user_tables WHERE relname = ANY($1)", list(CHURN_TABLES)
    )
    return {r["relname"]: r["vacuum_count"] for r in rows}


async def test_a_process_warns_once_at_start_when_autovacuum_leaves_a_churning_table(
    pool: asyncpg.Pool, database_url: str
) -> None:
    await pool.execute("ALTER TABLE request_signature SET (autovacuum_enabled = false)")
    with capture_logs() as logs:
        components = await build_components(pool, database_url)
        upkeep = StorageUpkeep(pool, components.settings)
        await upkeep.run_once()
        await upkeep.run_once()
    warnings = [entry for entry in logs if entry["event"].startswith(WARNING)]
    assert len(warnings) == 1
    assert warnings[0]["log_level"] == "warning"
    assert warnings[0]["tables"] == await _uncovered(pool)


async def test_no_warning_when_autovacuum_covers_every_churning_table(
    pool: asyncpg.Pool, database_url: str
) -> None:
    if not await pool.fetchval("SELECT current_setting('autovacuum')::boolean"):
        # The server's autovacuum is off (as on this machine): every process must warn, shown above.
        with capture_logs() as logs:
            await build_components(pool, database_url)
        assert [entry["tables"] for entry in logs if entry["event"].startswith(WARNING)] == [
            sorted(CHURN_TABLES)
        ]
        return
    with capture_logs() as logs:
        await build_components(pool, database_url)
    assert not [entry for entry in logs if entry["event"].startswith(WARNING)]


async def test_the_upkeep_vacuums_the_uncovered_tables_once_per_interval_over_all_processes(
    pool: asyncpg.Pool, database_url: str
) -> None:
    await pool.execute("ALTER TABLE request_signature SET (autovacuum_enabled = false)")
    settings = Settings(database_url=database_url, churn_vacuum_interval_ms=60_000)
    now = datetime(2030, 1, 1, tzinfo=UTC)
    first = StorageUpkeep(pool, settings, clock=lambda: now)
    second = StorageUpkeep(pool, settings, clock=lambda: now + timedelta(seconds=30))
    before = await _vacuum_counts(pool)
    uncovered = await _uncovered(pool)
    assert (await first.run_once()).vacuumed == tuple(uncovered)
    assert (await second.run_once()).vacuumed == ()  # the same interval: the first process did it

    async def vacuumed() -> bool:
        await pool.execute("SELECT pg_stat_clear_snapshot()")
        counts = await _vacuum_counts(pool)
        return all(counts[name] > before[name] for name in uncovered)

    await wait_until(vacuumed)
    later = StorageUpkeep(pool, settings, clock=lambda: now + timedelta(seconds=61))
    assert (await later.run_once()).vacuumed == tuple(uncovered)


async def test_the_upkeep_creates_the_months_ahead_as_time_passes(
    pool: asyncpg.Pool, database_url: str
) -> None:
    settings = Settings(database_url=database_url, history_partition_months_ahead=2)
    later = datetime.now(UTC) + timedelta(days=200)
    upkeep = StorageUpkeep(pool, settings, clock=lambda: later)
    assert (await upkeep.run_once()).partition_months_created == 3  # its month and the two after it
    assert (
        await StorageUpkeep(pool, settings, clock=lambda: later).run_once()
    ).partition_months_created is None
    month = later.replace(day=1)
    for parent in ("intent", "settlement", "ledger_transfer"):
        name = f"{parent}_p{month:%Y_%m}"
        assert (
            await pool.fetchval("SELECT count(*) FROM pg_inherits WHERE inhrelid = to_regclass($1)", name)
            == 1
        )
