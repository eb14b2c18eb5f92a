"""The job engine's schema on its own: what a program using `paymanager.jobs` as a library migrates.

The engine's migrations (versions 0100-0199, and 0615, 0617, 0618 and 0619 of its limited claim:
migrations.py's JOB_ENGINE_VERSIONS) create the `job*` tables, types and functions and refer to
nothing outside them, so they install on any database; the rest of paymanager's schema (ledger,
payments) is not written. The version table is paymanager's (`schema_migrations`): a later full
`paymanager migrate` of the same database adds the other components and keeps these.
"""

from __future__ import annotations

import paymanager.db.migrations as migrations
from paymanager.db.pool import Conn


async def migrate(conn: Conn) -> list[str]:
    """Apply the job engine's missing migrations (idempotent, safe to run from many processes at
    once); returns the names of those applied, `NNNN_name`."""
    applied = await migrations.migrate_job_engine(conn)
    return [f"{m.version:04d}_{m.name}" for m in applied]
