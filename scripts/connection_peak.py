"""Sample the number of server connections while a command runs; print the peak.

Needs the `bench` extra (psycopg, so the sampler runs in a thread of its own). Used to check that
the test suite fits a stock PostgreSQL (max_connections = 100) on its own:
`.venv/bin/python scripts/connection_peak.py -- .venv/bin/pytest -n 4 -q`.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import psycopg


def main() -> int:
    command = sys.argv[sys.argv.index("--") + 1 :]
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True) as conn:
            while not done.is_set():
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
                )
                count = row.fetchone()
                peak[0] = max(peak[0], int(count[0]) if count else 0)
                time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    code = subprocess.call(command)  # noqa: S603 - the developer's own command line
    done.set()
    sampler.join()
    print(f"peak client connections: {peak[0]}")
    return code


if __name__ == "__main__":
    sys.exit(main())
