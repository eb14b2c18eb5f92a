"""The policy store: the only reader of `policies.sql`."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import cast

import asyncpg

from paymanager.db.pool import Conn
from paymanager.db.sql import load_queries
from paymanager.domain.policies import Policy

Q = load_queries("paymanager.application.policies", "policies.sql")


@dataclass(frozen=True, slots=True)
class StoredPolicy:
    """One row of `policy`."""

    id: uuid.UUID
    channel: str
    service_id: str | None
    min_amount: int | None
    max_amount: int | None
    daily_volume_per_account: int | None
    currencies: list[str] | None
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> StoredPolicy:
        return cls(
            id=row["id"],
            channel=row["channel"],
            service_id=row["service_id"],
            min_amount=row["min_amount"],
            max_amount=row["max_amount"],
            daily_volume_per_account=row["daily_volume_per_account"],
            currencies=row["currencies"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
        )

    @property
    def rule(self) -> Policy:
        """The domain's policy, which the checks take."""
        return Policy(
            id=str(self.id),
            channel=self.channel,
            service_id=self.service_id,
            min_amount=self.min_amount,
            max_amount=self.max_amount,
            daily_volume_per_account=self.daily_volume_per_account,
            currencies=frozenset(self.currencies) if self.currencies is not None else None,
        )


def policy_from_json(value: Mapping[str, object]) -> Policy:
    """A policy from its row as JSON (`to_jsonb(policy)`), as a statement reading it beside other
    tables returns it."""
    currencies = cast("list[str] | None", value["currencies"])
    return Policy(
        id=str(value["id"]),
        channel=cast(str, value["channel"]),
        service_id=cast("str | None", value["service_id"]),
        min_amount=cast("int | None", value["min_amount"]),
        max_amount=cast("int | None", value["max_amount"]),
        daily_volume_per_account=cast("int | None", value["daily_volume_per_account"]),
        currencies=frozenset(currencies) if currencies is not None else None,
    )


class PolicyStore:
    __slots__ = ("_conn",)

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    async def upsert(
        self,
        *,
        policy_id: uuid.UUID,
        channel: str,
        service_id: str | None,
        min_amount: int | None,
        max_amount: int | None,
        daily_volume_per_account: int | None,
        currencies: list[str] | None,
        now: datetime,
    ) -> StoredPolicy:
        """Create or replace the policy of (channel, service); `policy_id` names a new one."""
        row = await self._conn.fetchrow(
            Q["policy_upsert"], policy_id, channel, service_id, min_amount, max_amount,
            daily_volume_per_account, currencies, now,
        )  # fmt: skip
        assert row is not None, "an upsert returns its row"
        return StoredPolicy.from_row(row)

    async def page(self, *, limit: int) -> list[StoredPolicy]:
        return [StoredPolicy.from_row(row) for row in await self._conn.fetch(Q["policy_list"], limit)]

    async def get(self, *, policy_id: uuid.UUID) -> StoredPolicy | None:
        row = await self._conn.fetchrow(Q["policy_get"], policy_id)
        return StoredPolicy.from_row(row) if row is not None else None

    async def delete(self, *, policy_id: uuid.UUID) -> bool:
        """True when the policy existed."""
        return await self._conn.fetchval(Q["policy_delete"], policy_id) is not None

    async def matching(self, *, channel: str, service_id: str) -> list[Policy]:
        """The channel-wide policy of `channel` and the one of `service_id`."""
        rows = await self._conn.fetch(Q["policy_matching"], channel, service_id)
        return [StoredPolicy.from_row(row).rule for row in rows]
