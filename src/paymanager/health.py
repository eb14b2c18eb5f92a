"""`paymanager health`: the exec probe that headless pods lacked in the source system."""

from __future__ import annotations

import os
import socket

from paymanager.db.database import Database


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


async def check_local_processes(database: Database, stale_ms: int) -> tuple[bool, str]:
    """True when at least one process row of this host is running, alive and freshly heartbeating."""
    async with database.pool.acquire() as conn:
        rows = await conn.fetch(
            """
            SELECT id, pid, roles, extract(epoch FROM now() - heartbeat_at) * 1000 AS age_ms
              FROM process
             WHERE hostname = $1 AND stopped_at IS NULL
             ORDER BY heartbeat_at DESC
            """,
            socket.gethostname(),
        )
    for row in rows:
        # A row whose pid is gone was killed without a chance to mark itself stopped.
        if row["age_ms"] <= stale_ms and _pid_alive(row["pid"]):
            return (
                True,
                f"healthy: {row['id']} roles={','.join(row['roles'])} heartbeat {row['age_ms']:.0f} ms ago",
            )
    return False, "unhealthy: no paymanager process on this host has a fresh heartbeat"
