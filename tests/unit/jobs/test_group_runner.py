"""The grouping of `GroupRunner` (jobs/batch.py): items submitted together run as one group, within
the group and in-flight limits; each caller gets its own outcome; an error of the group reaches
every caller of it; a caller cancelled before its group starts is dropped."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from paymanager.jobs.batch import GroupRunner


class _Recording:
    """A work function that records each group it ran and answers each item doubled (or raises the
    exception an item is)."""

    def __init__(self) -> None:
        self.groups: list[list[int]] = []
        self.release = asyncio.Event()
        self.release.set()

    async def work(self, items: list[int]) -> list[int | Exception]:
        self.groups.append(list(items))
        await self.release.wait()
        return [ValueError(f"item {item}") if item < 0 else 2 * item for item in items]


async def test_items_submitted_together_run_as_one_group_each_with_its_own_outcome() -> None:
    work = _Recording()
    runner: GroupRunner[int, int] = GroupRunner(work.work, batch_max=10, batches_in_flight_max=1)
    outcomes = await asyncio.gather(*(runner.submit(i) for i in (1, 2, -3, 4)), return_exceptions=True)
    assert work.groups == [[1, 2, -3, 4]]
    assert outcomes[:2] == [2, 4]
    assert outcomes[3] == 8
    assert isinstance(outcomes[2], ValueError)


async def _until(condition: Callable[[], object]) -> None:
    """Let the loop turn until `condition` holds (the runner's tasks run on this loop)."""
    for _ in range(1_000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition did not come about")


async def test_groups_keep_to_the_size_and_in_flight_limits_and_the_waiting_join_the_next() -> None:
    work = _Recording()
    work.release.clear()
    runner: GroupRunner[int, int] = GroupRunner(work.work, batch_max=2, batches_in_flight_max=1)
    first = [asyncio.ensure_future(runner.submit(i)) for i in range(2)]
    await _until(lambda: work.groups)
    # Submitted on separate turns while the one group in flight holds them back: they wait, and
    # then go as groups of at most two, not one each.
    later = []
    for i in range(2, 5):
        later.append(asyncio.ensure_future(runner.submit(i)))
        await asyncio.sleep(0)
    work.release.set()
    assert await asyncio.gather(*first, *later) == [0, 2, 4, 6, 8]
    assert work.groups == [[0, 1], [2, 3], [4]]


async def test_an_error_of_the_group_reaches_every_caller_of_that_group() -> None:
    async def fails(items: list[int]) -> list[int | Exception]:
        raise RuntimeError("the group's transaction failed")

    runner: GroupRunner[int, int] = GroupRunner(fails, batch_max=10, batches_in_flight_max=1)
    outcomes = await asyncio.gather(*(runner.submit(i) for i in range(3)), return_exceptions=True)
    assert all(isinstance(outcome, RuntimeError) for outcome in outcomes)


async def test_a_caller_cancelled_before_its_group_starts_is_dropped() -> None:
    work = _Recording()
    work.release.clear()
    runner: GroupRunner[int, int] = GroupRunner(work.work, batch_max=10, batches_in_flight_max=1)
    running = asyncio.ensure_future(runner.submit(1))
    await _until(lambda: work.groups)
    waiting = [asyncio.ensure_future(runner.submit(i)) for i in (2, 3)]
    await asyncio.sleep(0)  # both submitted: queued behind the group in flight
    waiting[0].cancel()
    work.release.set()
    assert await running == 2
    assert await waiting[1] == 6
    with pytest.raises(asyncio.CancelledError):
        await waiting[0]
    assert work.groups == [[1], [3]]


async def test_after_group_gets_the_results_of_the_items_that_succeeded() -> None:
    seen: list[list[int]] = []

    async def after(results: list[int]) -> None:
        seen.append(results)

    work = _Recording()
    runner: GroupRunner[int, int] = GroupRunner(
        work.work, batch_max=10, batches_in_flight_max=1, after_group=after
    )
    await asyncio.gather(*(runner.submit(i) for i in (1, -2, 3)), return_exceptions=True)
    assert seen == [[2, 6]]
