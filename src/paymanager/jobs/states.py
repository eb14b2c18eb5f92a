"""The job lifecycle (drawn in docs/state_machines.md; tested against the database's `job_state`)."""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    SCHEDULED = "scheduled"
    AVAILABLE = "available"
    RUNNING = "running"
    RETRYABLE = "retryable"
    COMPLETED = "completed"
    DEAD = "dead"
    CANCELLED = "cancelled"
    WAITING_CHILDREN = "waiting_children"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset({JobState.COMPLETED, JobState.DEAD, JobState.CANCELLED})
UNFINISHED_STATES = frozenset(JobState) - TERMINAL_STATES
