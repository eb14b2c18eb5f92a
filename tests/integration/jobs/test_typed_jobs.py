"""Typed jobs: a kind's pydantic payload model validates at enqueue and reaches the handler as the
model; its result model checks what the handler returns (docs/state_machines.md, "Typed jobs")."""

from __future__ import annotations

import asyncpg
import pytest
from pydantic import BaseModel, Field

from paymanager.jobs import InvalidJobError, JobContext, Registry, enqueue
from tests.integration.jobs.conftest import StartWorker, wait_state


class Charge(BaseModel):
    intent_id: int
    amount_minor: int = Field(gt=0)
    currency: str = Field(min_length=3, max_length=3)


class Receipt(BaseModel):
    reference: str


class Other(BaseModel):
    x: int = 0


def typed_registry(seen: list[object], *, result: object = None) -> Registry:
    registry = Registry()

    @registry.handler("charge", payload_model=Charge, result_model=Receipt, max_attempts=3)
    async def charge(payload: Charge, ctx: JobContext) -> object:
        seen.append(payload)
        return result if result is not None else Receipt(reference=f"r-{payload.intent_id}")

    return registry


async def test_a_bad_payload_is_refused_at_enqueue_saying_what_is_wrong(conn: asyncpg.Connection) -> None:
    registry = typed_registry([])
    with pytest.raises(InvalidJobError) as caught:
        await registry.enqueue(conn, "charge", {"intent_id": "seven", "amount_minor": 0, "currency": "EUR"})
    message = str(caught.value)
    assert "payload of job kind 'charge' is invalid" in message
    assert "intent_id" in message
    assert "amount_minor" in message
    with pytest.raises(InvalidJobError, match="takes a Charge payload, got Other"):
        await registry.enqueue(conn, "charge", Other())
    assert await conn.fetchval("SELECT count(*) FROM job") == 0


async def test_the_handler_receives_the_model_and_its_result_is_checked_and_stored(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    seen: list[object] = []
    registry = typed_registry(seen)
    async with pool.acquire() as conn:
        by_model = await registry.enqueue(
            conn, "charge", Charge(intent_id=7, amount_minor=100, currency="EUR")
        )
        by_dict = await registry.enqueue(
            conn, "charge", {"intent_id": 8, "amount_minor": 5, "currency": "USD"}
        )
        assert await conn.fetchval("SELECT payload FROM job WHERE id = $1", by_model.id) == {
            "intent_id": 7, "amount_minor": 100, "currency": "EUR",
        }  # fmt: skip
    await start_worker(registry)
    await wait_state(pool, by_model.id, "completed")
    await wait_state(pool, by_dict.id, "completed")
    assert sorted(p.intent_id for p in seen if isinstance(p, Charge)) == [7, 8]
    assert len(seen) == 2
    stored = await pool.fetchval("SELECT result FROM job WHERE id = $1", by_model.id)
    assert stored == {"reference": "r-7"}
    spec = registry.get("charge")
    assert spec is not None
    assert spec.read_result(stored) == Receipt(reference="r-7")


async def test_a_stored_payload_that_does_not_fit_kills_the_job_at_once(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    seen: list[object] = []
    registry = typed_registry(seen)
    # Written past the registry (another producer): the handler never runs, no retry can help.
    job = await enqueue(pool, "charge", {"intent_id": 1})
    await start_worker(registry)
    await wait_state(pool, job.id, "dead")
    row = await pool.fetchrow("SELECT attempt, last_error FROM job WHERE id = $1", job.id)
    assert row is not None
    assert row["attempt"] == 1
    assert "amount_minor" in row["last_error"]["error"]
    assert seen == []


async def test_a_result_that_does_not_fit_kills_the_job(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    registry = typed_registry([], result={"no_reference": True})
    async with pool.acquire() as conn:
        job = await registry.enqueue(conn, "charge", {"intent_id": 1, "amount_minor": 1, "currency": "EUR"})
    await start_worker(registry)
    await wait_state(pool, job.id, "dead")
    error = await pool.fetchval("SELECT last_error FROM job WHERE id = $1", job.id)
    assert "result of job kind 'charge' is invalid" in error["error"]


async def test_a_sync_typed_handler_receives_the_model(pool: asyncpg.Pool, start_worker: StartWorker) -> None:
    seen: list[object] = []
    registry = Registry()

    def sync_charge(payload: Charge, ctx: JobContext) -> dict[str, str]:
        seen.append(payload)
        return {"reference": "sync"}

    registry.register("charge", sync_charge, payload_model=Charge, result_model=Receipt)
    async with pool.acquire() as conn:
        job = await registry.enqueue(conn, "charge", {"intent_id": 3, "amount_minor": 1, "currency": "EUR"})
    await start_worker(registry)
    await wait_state(pool, job.id, "completed")
    assert seen == [Charge(intent_id=3, amount_minor=1, currency="EUR")]
    assert await pool.fetchval("SELECT result FROM job WHERE id = $1", job.id) == {"reference": "sync"}
