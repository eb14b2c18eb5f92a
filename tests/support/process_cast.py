"""The processes of a whole-service test: headless paymanager workers by role, kept at their replica
count while one at a time is killed with SIGKILL, and the sandboxes (`paymanager sandbox ...`) each
in a process of its own, so a test reads what they saw over HTTP as an operator would."""

from __future__ import annotations

import random
import time
from collections import Counter
from typing import Any

import httpx

from tests.support.processes import PaymanagerProcess, free_port

SANDBOX_START_TIMEOUT_SEC = 60
SANDBOX_POLL_INTERVAL_SEC = 0.05
# The route each sandbox answers once it serves: how a test knows it is up.
READY_PATHS = {
    "psp": "/admin/submissions",
    "giftcard": "/_sandbox/counters",
    "card": "/_sandbox/counters",
    "merchant": "/_control/received",
}


class SandboxProcess:
    """`paymanager sandbox KIND --port P ...` until closed; `url` once it answers."""

    def __init__(self, kind: str, env: dict[str, str], *args: str) -> None:
        self.kind = kind
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = PaymanagerProcess(env, ["sandbox", kind, "--port", str(self.port), *args])
        deadline = time.monotonic() + SANDBOX_START_TIMEOUT_SEC
        while not self._answers():
            if self.process.proc.poll() is not None or time.monotonic() > deadline:
                output = self.process.output
                self.process.close()
                raise AssertionError(f"the {kind} sandbox did not start:\n{output}")
            time.sleep(SANDBOX_POLL_INTERVAL_SEC)

    def _answers(self) -> bool:
        try:
            return httpx.get(self.url + READY_PATHS[self.kind], timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def get(self, path: str) -> Any:
        response = httpx.get(self.url + path, timeout=30)
        response.raise_for_status()
        return response.json()

    def post(self, path: str, payload: object) -> Any:
        response = httpx.post(self.url + path, json=payload, timeout=30)
        response.raise_for_status()
        return response.json()

    def close(self) -> None:
        self.process.close()


class Cast:
    """Headless paymanager processes, `replicas[role]` of each role with `envs[role]`; `kill_random`
    kills one of them with SIGKILL and starts its replacement at once."""

    def __init__(self, envs: dict[str, dict[str, str]], replicas: dict[str, int]) -> None:
        self.envs = envs
        self.alive: list[tuple[str, PaymanagerProcess]] = []
        self.gone: list[PaymanagerProcess] = []
        self.kills: Counter[str] = Counter()
        # Processes that ended by themselves (one started while PostgreSQL was down exits 1).
        self.exits: Counter[str] = Counter()
        self.start(replicas)

    def start(self, replicas: dict[str, int]) -> None:
        for role, count in replicas.items():
            self.alive += [(role, PaymanagerProcess(self.envs[role])) for _ in range(count)]

    def kill_random(self, rng: random.Random) -> str:
        role, victim = self.alive.pop(rng.randrange(len(self.alive)))
        victim.kill()
        self.gone.append(victim)
        self.kills[role] += 1
        self.alive.append((role, PaymanagerProcess(self.envs[role])))
        return role

    def replace_exited(self) -> None:
        for index, (role, process) in enumerate(self.alive):
            if process.proc.poll() is not None:
                self.gone.append(process)
                self.exits[role] += 1
                self.alive[index] = (role, PaymanagerProcess(self.envs[role]))

    def tails(self, chars: int = 2_000) -> str:
        """The end of each live process's log, for a failure message."""
        return "\n".join(f"--- {role} ---\n{process.output[-chars:]}" for role, process in self.alive)

    def close(self) -> None:
        for _, process in self.alive:
            process.close()
        for process in self.gone:
            process.close()
