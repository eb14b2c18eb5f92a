"""A JobContext built from a claimed job row, for tests that drive the engine's batch API directly."""

from __future__ import annotations

from typing import Any

import asyncpg

from paymanager.jobs import JobContext


async def _noop_progress(ctx: JobContext, pct: float) -> None:
    del ctx, pct


def context_from_row(pool: asyncpg.Pool, row: Any, *, max_attempts: int) -> JobContext:
    """The context a worker would give the handler of `row` (a job claimed with its lease token)."""
    return JobContext(
        id=row["id"], kind=row["kind"], queue=row["queue"], payload=row["payload"], attempt=row["attempt"],
        max_attempts=max_attempts, priority=row["priority"], parent_id=row["parent_id"],
        lease_token=row["lease_token"], _pool=pool, _on_progress=_noop_progress,
    )  # fmt: skip
