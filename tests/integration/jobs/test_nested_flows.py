"""Nested flows (a child may be a flow itself, at any depth) and failure policies per child: fail
the parent, ignore the child, or continue and report (docs/state_machines.md, "Flows")."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from paymanager.jobs import Flow, InvalidJobError, JobContext, NewJob, PermanentError, Registry, enqueue_flow
from paymanager.jobs.enqueue import FLOW_DEPTH_MAX
from tests.integration.jobs.conftest import StartWorker, wait_state


def recording_registry(ran: list[str], saw: dict[str, Any]) -> Registry:
    registry = Registry()

    async def leaf(ctx: JobContext) -> str:
        ran.append(ctx.payload["name"])
        return str(ctx.payload["name"])

    async def node(ctx: JobContext) -> str:
        ran.append(ctx.payload["name"])
        saw[ctx.payload["name"]] = sorted((await ctx.children_results()).values(), key=str)
        saw[ctx.payload["name"] + ".failures"] = [f["kind"] for f in await ctx.children_failures()]
        return str(ctx.payload["name"])

    async def broken(ctx: JobContext) -> None:
        ran.append(ctx.payload["name"])
        raise PermanentError("declined")

    registry.register("leaf", leaf)
    registry.register("node", node)
    registry.register("broken", broken)
    return registry


def leaf(name: str, **kwargs: Any) -> NewJob:
    return NewJob("leaf", {"name": name}, **kwargs)


def node(name: str) -> NewJob:
    return NewJob("node", {"name": name})


async def test_a_child_flow_runs_its_own_children_first_at_any_depth(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    ran: list[str] = []
    saw: dict[str, Any] = {}
    flow = Flow(node("root"), [leaf("a"), Flow(node("mid"), [leaf("b"), Flow(node("low"), [leaf("c")])])])
    root, children = await enqueue_flow(pool, flow)
    assert len(children) == 2
    await start_worker(recording_registry(ran, saw))
    await wait_state(pool, root, "completed")
    assert ran.index("c") < ran.index("low") < ran.index("mid") < ran.index("root")
    assert ran.index("b") < ran.index("mid")
    assert ran.index("a") < ran.index("root")
    assert saw["root"] == ["a", "mid"]
    assert saw["mid"] == ["b", "low"]
    assert await pool.fetchval("SELECT count(*) FROM job WHERE state = 'completed'") == 6


async def test_a_failed_child_flow_fails_every_parent_above_it_by_default(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    ran: list[str] = []
    flow = Flow(node("root"), [Flow(node("mid"), [NewJob("broken", {"name": "x"})])])
    root, (mid,) = await enqueue_flow(pool, flow)
    await start_worker(recording_registry(ran, {}))
    await wait_state(pool, root, "dead")
    assert await pool.fetchval("SELECT state FROM job WHERE id = $1", mid) == "dead"
    assert "mid" not in ran
    assert "root" not in ran


async def test_a_childs_own_policy_wins_over_its_parents(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    ran: list[str] = []
    saw: dict[str, Any] = {}
    flow = Flow(
        node("root"),
        [leaf("a"), NewJob("broken", {"name": "x"}, on_dead="ignore")],
        on_child_dead="fail",
    )
    root, _ = await enqueue_flow(pool, flow)
    await start_worker(recording_registry(ran, saw))
    await wait_state(pool, root, "completed")
    assert saw["root.failures"] == ["broken"]


async def test_a_child_flows_policy_applies_to_its_own_failure(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    ran: list[str] = []
    # The sub-flow dies (its child died, policy "fail"); as a child it is ignored by the root.
    flow = Flow(
        node("root"), [leaf("a"), Flow(node("mid"), [NewJob("broken", {"name": "x"})], on_dead="ignore")]
    )
    root, (_, mid) = await enqueue_flow(pool, flow)
    await start_worker(recording_registry(ran, {}))
    await wait_state(pool, root, "completed")
    assert await pool.fetchval("SELECT state FROM job WHERE id = $1", mid) == "dead"


async def test_continue_runs_the_parent_as_soon_as_a_child_fails_and_reports_it(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    ran: list[str] = []
    saw: dict[str, Any] = {}
    later = datetime.now(UTC) + timedelta(hours=1)
    flow = Flow(
        node("root"), [NewJob("broken", {"name": "x"}), leaf("late", run_at=later)], on_child_dead="continue"
    )
    root, (_, late) = await enqueue_flow(pool, flow)
    await start_worker(recording_registry(ran, saw))
    await wait_state(pool, root, "completed")
    assert saw["root.failures"] == ["broken"]
    assert "late" not in ran
    assert await pool.fetchval("SELECT state FROM job WHERE id = $1", late) == "scheduled"


async def test_the_old_call_form_still_writes_a_flow(conn: asyncpg.Connection) -> None:
    parent, children = await enqueue_flow(conn, node("p"), [leaf("a"), leaf("b")], on_child_dead="ignore")
    row = await conn.fetchrow("SELECT state, pending_children, on_child_dead FROM job WHERE id = $1", parent)
    assert row is not None
    assert tuple(row) == ("waiting_children", 2, "ignore")
    assert len(children) == 2


async def test_bad_flows_are_refused_and_write_nothing(conn: asyncpg.Connection) -> None:
    deep: Flow = Flow(node("n"), [leaf("x")])
    for _ in range(FLOW_DEPTH_MAX + 1):
        deep = Flow(node("n"), [deep])
    with pytest.raises(InvalidJobError, match="levels deep"):
        await enqueue_flow(conn, deep)
    with pytest.raises(InvalidJobError, match="child policy"):
        await enqueue_flow(conn, Flow(node("n"), [leaf("x", on_dead="maybe")]))  # type: ignore[arg-type]
    with pytest.raises(InvalidJobError, match="children"):
        await enqueue_flow(conn, Flow(node("n"), [Flow(node("m"), [])]))
    with pytest.raises(InvalidJobError, match="not beside it"):
        await enqueue_flow(conn, Flow(node("n"), [leaf("x")]), [leaf("y")])
    assert await conn.fetchval("SELECT count(*) FROM job") == 0
