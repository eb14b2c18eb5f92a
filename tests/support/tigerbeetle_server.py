"""A TigerBeetle replica of the test process's own: the shipped binary on a free port, its data file in
a temporary directory, stopped (and the file deleted) at the end.

A `--development` replica allocates about 1.4 GiB; `--experimental --limit-request=1MiB` adds about
350 MiB so that requests hold full batches (8,189 events). Tests therefore share one replica per test
process (a session fixture), each test on a ledger number of its own.

The binary is `TIGERBEETLE_BIN`, else `tigerbeetle` on PATH, else the shared build next to the
repository (`../shared/bin/tigerbeetle`). Without it, TigerBeetle tests skip locally and FAIL in CI,
as the Redis tests do.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support.processes import free_port

START_TIMEOUT_SEC = 120  # the replica faults in its whole allocation first: slow on a busy machine
SHARED_BINARY = Path(__file__).resolve().parents[2].parent / "shared" / "bin" / "tigerbeetle"
FALLBACK_BINARY = Path("/work/shared/bin/tigerbeetle")


def find_binary() -> str | None:
    explicit = os.environ.get("TIGERBEETLE_BIN")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    on_path = shutil.which("tigerbeetle")
    if on_path:
        return on_path
    for candidate in (SHARED_BINARY, FALLBACK_BINARY):
        if os.access(candidate, os.X_OK):
            return str(candidate)
    return None


class TigerBeetleReplica:
    """One replica of a cluster (one replica alone, or one of `replica_count` on one machine)."""

    def __init__(
        self,
        binary: str,
        directory: Path,
        *,
        ports: list[int],
        replica: int = 0,
        full_batches: bool = True,
    ) -> None:
        self.binary = binary
        self.ports = ports
        self.replica = replica
        self.data_file = directory / f"0_{replica}.tigerbeetle"
        self.log_path = directory / f"replica_{replica}.log"
        self._full_batches = full_batches
        self.proc: subprocess.Popen[bytes] | None = None
        subprocess.run(
            [
                binary, "format", "--cluster=0", f"--replica={replica}", f"--replica-count={len(ports)}",
                "--development", str(self.data_file),
            ],
            check=True, capture_output=True,
        )  # fmt: skip

    @property
    def addresses(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for port in self.ports)

    def start(self) -> None:
        args = [self.binary, "start", f"--addresses={self.addresses}", "--development"]
        if self._full_batches:
            args += ["--experimental", "--limit-request=1MiB"]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen([*args, str(self.data_file)], stdout=log, stderr=subprocess.STDOUT)

    def wait_listening(self) -> None:
        """Until this replica accepts connections (the client connects to any replica)."""
        port = self.ports[self.replica]
        deadline = time.monotonic() + START_TIMEOUT_SEC
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"tigerbeetle exited with {self.proc.returncode}: {self.log_path.read_text()[-2000:]}"
                )
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    return
            time.sleep(0.05)
        raise RuntimeError(f"tigerbeetle did not listen on {port} within {START_TIMEOUT_SEC} s")

    def kill(self) -> None:
        """kill -9: the replica's crash, its data file kept for a restart."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None


class TigerBeetleCluster:
    """`replica_count` replicas on free ports of this machine, data files in a temporary directory."""

    def __init__(self, binary: str, *, replica_count: int = 1, full_batches: bool = True) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="pm-tigerbeetle-")
        ports = [free_port() for _ in range(replica_count)]
        self.replicas = [
            TigerBeetleReplica(
                binary, Path(self._dir.name), ports=ports, replica=i, full_batches=full_batches
            )
            for i in range(replica_count)
        ]
        try:
            for replica in self.replicas:
                replica.start()
            for replica in self.replicas:
                replica.wait_listening()
        except BaseException:
            self.close()
            raise

    @property
    def address(self) -> str:
        """TB_ADDRESS for this cluster: every replica's address."""
        return self.replicas[0].addresses

    def close(self) -> None:
        for replica in self.replicas:
            replica.stop()
        self._dir.cleanup()
