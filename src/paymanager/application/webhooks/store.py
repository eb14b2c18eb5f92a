"""The webhook store: the only reader of `webhooks.sql` (endpoints, events, deliveries)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg

from paymanager.db.pool import Conn
from paymanager.db.sql import load_queries

Q = load_queries("paymanager.application.webhooks", "webhooks.sql")


@dataclass(frozen=True, slots=True)
class Endpoint:
    id: str
    service_id: str
    url: str
    event_types: list[str]
    description: str | None
    secret_ciphertext: bytes
    secret_key_id: str
    previous_secret_ciphertext: bytes | None
    previous_secret_key_id: str | None
    previous_secret_expires_at: datetime | None
    status: str
    disabled_reason: str | None
    failing_since: datetime | None
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> Endpoint:
        return cls(
            id=row["id"], service_id=row["service_id"], url=row["url"], event_types=list(row["event_types"]),
            description=row["description"], secret_ciphertext=row["secret_ciphertext"],
            secret_key_id=row["secret_key_id"], previous_secret_ciphertext=row["previous_secret_ciphertext"],
            previous_secret_key_id=row["previous_secret_key_id"],
            previous_secret_expires_at=row["previous_secret_expires_at"], status=row["status"],
            disabled_reason=row["disabled_reason"], failing_since=row["failing_since"],
            created_at=row["created_at"], updated_at=row["updated_at"],
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class DeliveryWork:
    """What one attempt needs: the delivery, its event's body, its endpoint's URL and secrets."""

    id: str
    status: str
    event_id: str
    endpoint_id: str
    service_id: str
    type: str
    body: str
    url: str
    endpoint_status: str
    secret_ciphertext: bytes
    secret_key_id: str
    previous_secret_ciphertext: bytes | None
    previous_secret_key_id: str | None
    previous_secret_expires_at: datetime | None

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> DeliveryWork:
        return cls(
            id=row["id"], status=row["status"], event_id=row["event_id"], endpoint_id=row["endpoint_id"],
            service_id=row["service_id"], type=row["type"], body=row["body"], url=row["url"],
            endpoint_status=row["endpoint_status"], secret_ciphertext=row["secret_ciphertext"],
            secret_key_id=row["secret_key_id"], previous_secret_ciphertext=row["previous_secret_ciphertext"],
            previous_secret_key_id=row["previous_secret_key_id"],
            previous_secret_expires_at=row["previous_secret_expires_at"],
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Delivery:
    """A delivery as the log shows it."""

    id: str
    event_id: str
    endpoint_id: str
    service_id: str
    type: str
    status: str
    attempts: int
    last_status_code: int | None
    last_error: str | None
    last_latency_ms: int | None
    last_attempt_at: datetime | None
    next_attempt_at: datetime | None
    created_at: datetime
    finished_at: datetime | None
    job_id: int | None

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> Delivery:
        return cls(
            id=row["id"], event_id=row["event_id"], endpoint_id=row["endpoint_id"],
            service_id=row["service_id"], type=row["type"], status=row["status"], attempts=row["attempts"],
            last_status_code=row["last_status_code"], last_error=row["last_error"],
            last_latency_ms=row["last_latency_ms"], last_attempt_at=row["last_attempt_at"],
            next_attempt_at=row["next_attempt_at"], created_at=row["created_at"],
            finished_at=row["finished_at"], job_id=row["job_id"],
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class AttemptOutcome:
    status: str
    status_code: int | None
    error: str | None
    latency_ms: int | None
    at: datetime
    next_attempt_at: datetime | None


@dataclass(frozen=True, slots=True)
class Success:
    """A delivery's attempt answered 2xx."""

    delivery_id: str
    endpoint_id: str
    status_code: int
    latency_ms: int
    at: datetime


class WebhookStore:
    __slots__ = ("_conn",)

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    async def insert_endpoint(
        self, *, endpoint_id: str, service_id: str, url: str, event_types: list[str], description: str | None,
        secret_ciphertext: bytes, secret_key_id: str, now: datetime,
    ) -> Endpoint:  # fmt: skip
        row = await self._conn.fetchrow(
            Q["endpoint_insert"], endpoint_id, service_id, url, event_types, description, secret_ciphertext,
            secret_key_id, now,
        )  # fmt: skip
        assert row is not None
        return Endpoint.from_row(row)

    async def get_endpoint(self, *, endpoint_id: str, service_id: str | None) -> Endpoint | None:
        row = await self._conn.fetchrow(Q["endpoint_get"], endpoint_id, service_id)
        return None if row is None else Endpoint.from_row(row)

    async def list_endpoints(self, *, service_id: str | None, limit: int) -> list[Endpoint]:
        return [Endpoint.from_row(r) for r in await self._conn.fetch(Q["endpoint_list"], service_id, limit)]

    async def delete_endpoint(self, *, endpoint_id: str, service_id: str, now: datetime) -> bool:
        return await self._conn.fetchval(Q["endpoint_delete"], endpoint_id, service_id, now) is not None

    async def rotate_secret(
        self, *, endpoint_id: str, service_id: str, secret_ciphertext: bytes, secret_key_id: str,
        now: datetime, previous_expires_at: datetime,
    ) -> Endpoint | None:  # fmt: skip
        row = await self._conn.fetchrow(
            Q["endpoint_rotate"], endpoint_id, service_id, secret_ciphertext, secret_key_id, now,
            previous_expires_at,
        )  # fmt: skip
        return None if row is None else Endpoint.from_row(row)

    async def enable_endpoint(self, *, endpoint_id: str, service_id: str, now: datetime) -> Endpoint | None:
        row = await self._conn.fetchrow(Q["endpoint_enable"], endpoint_id, service_id, now)
        return None if row is None else Endpoint.from_row(row)

    async def disable_endpoint(self, *, endpoint_id: str, reason: str, now: datetime) -> bool:
        return await self._conn.fetchval(Q["endpoint_disable"], endpoint_id, reason, now) is not None

    async def record_endpoint_failure(self, *, endpoint_id: str, now: datetime) -> datetime:
        since: datetime = await self._conn.fetchval(Q["endpoint_record_failure"], endpoint_id, now)
        return since

    async def record_endpoint_success(self, *, endpoint_id: str) -> None:
        await self._conn.execute(Q["endpoint_record_success"], endpoint_id)

    async def record_endpoint_successes(self, *, endpoint_ids: list[str]) -> None:
        await self._conn.execute(Q["endpoint_record_success_many"], sorted(set(endpoint_ids)))

    async def record_successes(self, *, successes: list[Success]) -> None:
        """Successful attempts, in one statement (see `delivery_record_success_many`)."""
        await self._conn.execute(
            Q["delivery_record_success_many"], [s.delivery_id for s in successes],
            [s.status_code for s in successes], [s.latency_ms for s in successes], [s.at for s in successes],
        )  # fmt: skip

    async def load_delivery(self, *, delivery_id: str) -> DeliveryWork | None:
        row = await self._conn.fetchrow(Q["delivery_load"], delivery_id)
        return None if row is None else DeliveryWork.from_row(row)

    async def record_attempt(self, *, delivery_id: str, outcome: AttemptOutcome) -> bool:
        found = await self._conn.fetchval(
            Q["delivery_record_attempt"], delivery_id, outcome.status, outcome.status_code, outcome.error,
            outcome.latency_ms, outcome.at, outcome.next_attempt_at,
        )  # fmt: skip
        return found is not None

    async def cancel_delivery(self, *, delivery_id: str, reason: str, now: datetime) -> bool:
        return await self._conn.fetchval(Q["delivery_cancel"], delivery_id, reason, now) is not None

    async def dead_letter_for_job(self, *, job_id: int, reason: str) -> str | None:
        """The id of the unfinished delivery job `job_id` carried, now dead; None if there was none."""
        found = await self._conn.fetchval(Q["delivery_dead_with_job"], job_id, reason)
        return None if found is None else str(found)

    async def list_deliveries(
        self, *, service_id: str | None, endpoint_id: str | None, status: str | None,
        before: tuple[datetime, str] | None, limit: int,
    ) -> list[Delivery]:  # fmt: skip
        rows = await self._conn.fetch(
            Q["delivery_list"], service_id, endpoint_id, status, before[0] if before else None,
            before[1] if before else None, limit,
        )  # fmt: skip
        return [Delivery.from_row(r) for r in rows]

    async def get_delivery(self, *, delivery_id: str, service_id: str | None) -> Delivery | None:
        row = await self._conn.fetchrow(Q["delivery_get"], delivery_id, service_id)
        return None if row is None else Delivery.from_row(row)

    async def lock_delivery(self, *, delivery_id: str) -> str | None:
        status: str | None = await self._conn.fetchval(Q["delivery_lock"], delivery_id)
        return status

    async def restart_delivery(self, *, delivery_id: str, job_id: int, now: datetime) -> None:
        await self._conn.execute(Q["delivery_restart"], delivery_id, job_id, now)
