"""`make cluster`: a three-replica TigerBeetle cluster on this machine, until Ctrl-C.

Each replica is a `--development` one (about 1.4 GiB) with its data file in a temporary directory,
deleted at the end. Prints the TB_ADDRESS to run paymanager against it:

    LEDGER_BACKEND=tigerbeetle TB_ADDRESS=<printed> make run
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.tigerbeetle_server import TigerBeetleCluster, find_binary


def main() -> None:
    binary = find_binary()
    if binary is None:
        raise SystemExit("no tigerbeetle binary (TIGERBEETLE_BIN, PATH or ../shared/bin/tigerbeetle)")
    replicas = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    cluster = TigerBeetleCluster(binary, replica_count=replicas, full_batches=False)
    print(f"TB_ADDRESS={cluster.address}", flush=True)
    try:
        # Blocked only now: the replicas inherit the mask, and with SIGTERM blocked their stop would
        # wait out its timeout and end in SIGKILL.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    finally:
        cluster.close()


if __name__ == "__main__":
    main()
