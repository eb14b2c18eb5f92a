"""Admin operations, the one implementation behind the admin API, the dashboard and the CLI.

Every action that changes something runs in one transaction with its audit row (who, through what,
what, on which target, the state before and after), so an action is never done unaudited nor audited
undone. Reads are not audited. Inputs are checked here (queue names, ids, limits) and refused with
`ValueError`, which the API answers 422 and the CLI exits 2 with.
"""

from __future__ import annotations

import difflib
import getpass
import secrets
import socket
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Literal

import orjson

from paymanager.adapters.secret_box import SecretBox
from paymanager.application.admin.store import (
    AdminStore,
    AuditEntry,
    IntentFilter,
    IntentSummary,
    Json,
)
from paymanager.application.services import use_cases as services
from paymanager.application.services.use_cases import SECRET_BYTES, ServiceIdentity
from paymanager.db.pool import Conn, Pool
from paymanager.jobs import JobState, admin
from paymanager.jobs.options import QUEUE_PATTERN

Via = Literal["api", "dashboard", "cli"]
AUDIT_LIMIT_MAX = 500
INTENT_LIMIT_MAX = 500
JOB_LIST_LIMIT_MAX = admin.LIST_LIMIT_MAX
VERIFY_FACT = "ledger_verify"


@dataclass(frozen=True, slots=True)
class Actor:
    """Who acts: a service id (the API and the dashboard) or `cli:user@host`, and through what."""

    id: str
    via: Via

    @classmethod
    def cli(cls) -> Actor:
        try:
            user = getpass.getuser()
        except (KeyError, OSError):  # no name for this uid (a container's arbitrary user)
            user = "unknown"
        return cls(f"cli:{user}@{socket.gethostname()}", "cli")


def _json(value: object) -> Json:
    """A value as the audit stores it (datetimes and UUIDs as strings)."""
    decoded: Json = orjson.loads(orjson.dumps(value, default=str))
    return decoded


async def _audit(conn: Conn, actor: Actor, action: str, target: str, before: object, after: object) -> None:
    await AdminStore(conn).audit(
        actor=actor.id,
        via=actor.via,
        action=action,
        target=target[:500],
        before=_json(before),
        after=_json(after),
    )


# --- queues ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueueView:
    """A queue as an operator sees it: its settings, its jobs by state, how old its oldest due job is."""

    name: str
    paused: bool
    max_depth: int | None
    rate_limit: str | None
    concurrency_max: int | None
    waiting_events: bool
    counts: dict[str, int]
    oldest_available_s: float | None

    @property
    def depth(self) -> int:
        """Unfinished jobs (what max_depth bounds)."""
        return sum(n for state, n in self.counts.items() if state not in ("completed", "dead", "cancelled"))


async def queues(conn: Conn) -> list[QueueView]:
    counts = await admin.stats(conn)
    settings = {q.name: q for q in await admin.list_queues(conn)}
    ages = await admin.oldest_available_age(conn)
    views = []
    for name in sorted(set(counts) | set(settings)):
        s = settings.get(name)
        rate = (
            admin.format_rate_limit(s.rate_max, s.rate_window_ms)
            if s is not None and s.rate_max is not None and s.rate_window_ms is not None
            else None
        )
        views.append(
            QueueView(
                name=name,
                paused=bool(s and s.paused),
                max_depth=s.max_depth if s else None,
                rate_limit=rate,
                concurrency_max=s.concurrency_max if s else None,
                waiting_events=bool(s and s.waiting_events),
                counts=counts.get(name, {}),
                oldest_available_s=ages.get(name),
            )
        )
    return views


class UnknownQueueError(ValueError):
    """No job and no setting names this queue: a typo, most likely (the message suggests the nearest)."""

    def __init__(self, queue: str, known: Sequence[str]) -> None:
        close = difflib.get_close_matches(queue, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; known queues: {', '.join(known) or 'none'}"
        super().__init__(f"no queue named {queue!r}{hint}")
        self.queue = queue
        self.suggestion = close[0] if close else None


async def _known_queue(conn: Conn, queue: str) -> QueueView:
    if not QUEUE_PATTERN.match(queue):
        raise ValueError(f"queue {queue!r} must match {QUEUE_PATTERN.pattern}")
    views = await queues(conn)
    for view in views:
        if view.name == queue:
            return view
    raise UnknownQueueError(queue, [v.name for v in views])


async def pause_queue(conn: Conn, actor: Actor, queue: str) -> QueueView:
    async with conn.transaction():
        before = await _known_queue(conn, queue)
        await admin.pause_queue(conn, queue)
        after = await _known_queue(conn, queue)
        await _audit(
            conn, actor, "queue.pause", f"queue:{queue}", {"paused": before.paused}, {"paused": True}
        )
    return after


async def resume_queue(conn: Conn, actor: Actor, queue: str) -> QueueView:
    async with conn.transaction():
        before = await _known_queue(conn, queue)
        await admin.resume_queue(conn, queue)
        after = await _known_queue(conn, queue)
        await _audit(
            conn, actor, "queue.resume", f"queue:{queue}", {"paused": before.paused}, {"paused": False}
        )
    return after


async def set_max_depth(conn: Conn, actor: Actor, queue: str, max_depth: int | None) -> QueueView:
    async with conn.transaction():
        before = await _known_queue(conn, queue)
        await admin.set_max_depth(conn, queue, max_depth)
        after = await _known_queue(conn, queue)
        await _audit(
            conn, actor, "queue.max_depth", f"queue:{queue}", {"max_depth": before.max_depth},
            {"max_depth": after.max_depth},
        )  # fmt: skip
    return after


# --- jobs ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobFilter:
    state: JobState | None = None
    queue: str | None = None
    kind: str | None = None
    intent_id: uuid.UUID | None = None
    before_id: int | None = None


async def list_jobs(conn: Conn, where: JobFilter, *, limit: int = 50) -> list[dict[str, object]]:
    """Jobs newest first; `intent_id` keeps the jobs whose payload names that intent."""
    payload = {"intent_id": str(where.intent_id)} if where.intent_id is not None else None
    rows = await admin.list_jobs(
        conn, state=where.state, queue=where.queue, kind=where.kind, before_id=where.before_id, limit=limit,
        payload_contains=payload,
    )  # fmt: skip
    return [dict(row) for row in rows]


async def get_job(conn: Conn, job_id: int) -> dict[str, object] | None:
    row = await admin.get_job(conn, job_id)
    return dict(row) if row is not None else None


def _job_state(row: dict[str, object] | None) -> dict[str, object] | None:
    if row is None:
        return None
    return {"state": row.get("state"), "attempt": row.get("attempt"), "queue": row.get("queue")}


async def retry_job(conn: Conn, actor: Actor, job_id: int) -> bool:
    """Make a dead, cancelled, retryable or scheduled job available now; False if it is not one."""
    async with conn.transaction():
        before = await admin.get_job(conn, job_id)
        if before is None or not await admin.retry_job(conn, job_id):
            return False
        after = await admin.get_job(conn, job_id)
        await _audit(conn, actor, "job.retry", f"job:{job_id}", _job_state(before), _job_state(after))
    return True


@dataclass(frozen=True, slots=True)
class ReplayFilter:
    kind: str | None = None
    queue: str | None = None
    error_contains: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    @property
    def empty(self) -> bool:
        return all(value is None for value in asdict(self).values())


class ReplayNeedsFilterError(ValueError):
    def __init__(self) -> None:
        super().__init__("a replay needs a filter (kind, queue, error, since, until) or `all`")


async def replay_dead(
    conn: Conn, actor: Actor, where: ReplayFilter, *, replay_all: bool = False, limit: int = 1_000
) -> list[int]:
    """Replay the dead jobs matching every filter given; with no filter only when `replay_all`."""
    if where.empty and not replay_all:
        raise ReplayNeedsFilterError()
    async with conn.transaction():
        ids = await admin.replay_dead(
            conn, kind=where.kind, queue=where.queue, error_contains=where.error_contains, since=where.since,
            until=where.until, limit=limit,
        )  # fmt: skip
        await _audit(
            conn, actor, "job.replay", "jobs:dead", {"filter": asdict(where), "all": replay_all},
            {"replayed": ids[:1000], "count": len(ids)},
        )  # fmt: skip
    return ids


async def cancel_job(conn: Conn, actor: Actor, job_id: int) -> admin.CancelResult | None:
    async with conn.transaction():
        before = await admin.get_job(conn, job_id)
        result = await admin.cancel_job(conn, job_id)
        if result is None:
            return None
        after = await admin.get_job(conn, job_id)
        await _audit(conn, actor, "job.cancel", f"job:{job_id}", _job_state(before), _job_state(after))
    return result


# --- intents ---------------------------------------------------------------------------------------


async def search_intents(conn: Conn, where: IntentFilter, *, limit: int = 50) -> list[IntentSummary]:
    if not 1 <= limit <= INTENT_LIMIT_MAX:
        raise ValueError(f"limit must be within [1, {INTENT_LIMIT_MAX}]")
    return await AdminStore(conn).search_intents(where=where, limit=limit)


# --- services --------------------------------------------------------------------------------------


async def create_service(
    conn: Conn, box: SecretBox, actor: Actor, name: str, *, admin_scope: bool
) -> tuple[ServiceIdentity, str]:
    """Register a service; returns it and its secret (shown once)."""
    async with conn.transaction():
        identity, secret = await services.create_service(conn, box, name, admin=admin_scope)
        await _audit(
            conn, actor, "service.create", f"service:{identity.id}", None,
            {"name": name, "scopes": sorted(identity.scopes)},
        )  # fmt: skip
    return identity, secret


async def disable_service(conn: Conn, actor: Actor, service_id: str) -> bool:
    """Refuse the service's requests from now on (each api process within SERVICE_CACHE_TTL_MS)."""
    async with conn.transaction():
        disabled = await AdminStore(conn).disable_service(service_id=service_id)
        if disabled is None:
            return False
        await _audit(
            conn, actor, "service.disable", f"service:{service_id}",
            {"disabled_at": disabled.disabled_before}, {"disabled_at": disabled.disabled_at},
        )  # fmt: skip
    return True


async def rotate_secret(conn: Conn, box: SecretBox, actor: Actor, service_id: str) -> str | None:
    """A new secret for the service (the old one stops working within SERVICE_CACHE_TTL_MS); None
    when there is no such service. Only the secret's key id is audited, never the secret."""
    secret = "sk_" + secrets.token_hex(SECRET_BYTES)
    sealed = box.seal(secret.encode(), service_id.encode())
    async with conn.transaction():
        if not await AdminStore(conn).rotate_secret(
            service_id=service_id, ciphertext=sealed.ciphertext, key_id=sealed.key_id
        ):
            return None
        await _audit(
            conn, actor, "service.rotate_secret", f"service:{service_id}", None, {"key_id": sealed.key_id}
        )
    return secret


# --- the ledger's verification, the audit --------------------------------------------------------


async def record_verification(pool: Pool, *, ok: bool, violations: int) -> None:
    """Keep the last verification's result for the `paymanager_ledger_verify_*` gauges."""
    async with pool.acquire() as conn:
        await AdminStore(conn).write_fact(name=VERIFY_FACT, value={"ok": ok, "violations": violations})


async def audit_log(
    conn: Conn, *, target: str | None = None, action: str | None = None, before_id: int | None = None,
    limit: int = 100,
) -> list[AuditEntry]:  # fmt: skip
    if not 1 <= limit <= AUDIT_LIMIT_MAX:
        raise ValueError(f"limit must be within [1, {AUDIT_LIMIT_MAX}]")
    return await AdminStore(conn).audit_page(target=target, action=action, before_id=before_id, limit=limit)
