"""The service store: the only reader of `services.sql` (services and the signatures they used)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg

from paymanager.db.pool import Conn
from paymanager.db.sql import load_queries

Q = load_queries("paymanager.application.services", "services.sql")


@dataclass(frozen=True, slots=True)
class StoredService:
    """One row of `service`, its secret still sealed."""

    id: str
    name: str
    scopes: list[str]
    secret_ciphertext: bytes
    secret_key_id: str
    disabled_at: datetime | None
    requests_per_sec_max: int | None

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> StoredService:
        return cls(
            id=row["id"],
            name=row["name"],
            scopes=row["scopes"],
            secret_ciphertext=row["secret_ciphertext"],
            secret_key_id=row["secret_key_id"],
            disabled_at=row["disabled_at"],
            requests_per_sec_max=row["requests_per_sec_max"],
        )


@dataclass(frozen=True, slots=True)
class ServiceListing:
    """A service as `paymanager services list` shows it (no secret)."""

    id: str
    name: str
    scopes: list[str]
    created_at: datetime
    disabled_at: datetime | None
    requests_per_sec_max: int | None


class ServiceStore:
    __slots__ = ("_conn",)

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    async def insert(
        self, *, service_id: str, name: str, secret_ciphertext: bytes, secret_key_id: str, scopes: list[str]
    ) -> bool:
        """False when a service of that name exists."""
        row = await self._conn.fetchrow(
            Q["service_insert"], service_id, name, secret_ciphertext, secret_key_id, scopes
        )
        return row is not None

    async def get(self, *, service_id: str) -> StoredService | None:
        row = await self._conn.fetchrow(Q["service_get"], service_id)
        return StoredService.from_row(row) if row is not None else None

    async def exists(self, *, service_id: str) -> bool:
        return await self._conn.fetchval(Q["service_exists"], service_id) is not None

    async def page(self, *, limit: int) -> list[ServiceListing]:
        return [
            ServiceListing(
                row["id"],
                row["name"],
                row["scopes"],
                row["created_at"],
                row["disabled_at"],
                row["requests_per_sec_max"],
            )
            for row in await self._conn.fetch(Q["service_list"], limit)
        ]

    async def set_rate_limit(self, *, service_id: str, requests_per_sec: int | None) -> bool:
        """False when there is no such service."""
        return (
            await self._conn.fetchval(Q["service_set_rate_limit"], service_id, requests_per_sec) is not None
        )

    async def remember_signature(self, *, signature: bytes, service_id: str, expires_at: datetime) -> bool:
        """True the first time a signature is presented; False for a replay."""
        fresh = await self._conn.fetchval(Q["request_signature_remember"], signature, service_id, expires_at)
        return fresh is not None

    async def prune_signatures(self, *, now: datetime, limit: int) -> int:
        """Forget up to `limit` signatures out of their window at `now`; how many."""
        status = await self._conn.execute(Q["request_signature_prune"], now, limit)
        return int(status.split()[-1])
