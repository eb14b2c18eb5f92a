"""The PSP transaction state machine (drawn in docs/state_machines.md, enforced again by the schema).

    NEW --> QUERY_PENDING --> QUERIED --> CONFIRM_PENDING --> COMPLETED
                  |                            |  ^  '------> FAILED
                  |                            v  |  '------> MANUAL_REVIEW
                  |                         IN_PROGRESS ----> COMPLETED | FAILED | MANUAL_REVIEW
                  '--> FAILED | MANUAL_REVIEW
    MANUAL_REVIEW --resolve--> COMPLETED | FAILED

Write-ahead: QUERY_PENDING and CONFIRM_PENDING are committed BEFORE the PSP is called, so a worker
that finds a transaction in one of them knows a call may have reached the PSP and inquires instead
of sending again. COMPLETED and FAILED are terminal; MANUAL_REVIEW waits for an operator.
"""

from __future__ import annotations

from enum import StrEnum

from paymanager.domain.errors import InvalidTransitionError


class PspState(StrEnum):
    NEW = "NEW"
    QUERY_PENDING = "QUERY_PENDING"
    QUERIED = "QUERIED"
    CONFIRM_PENDING = "CONFIRM_PENDING"
    IN_PROGRESS = "IN_PROGRESS"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    MANUAL_REVIEW = "MANUAL_REVIEW"


TERMINAL: frozenset[PspState] = frozenset({PspState.COMPLETED, PspState.FAILED})

# States in which a call may have reached the PSP's transfer endpoint: money may have moved.
SUBMITTED: frozenset[PspState] = frozenset({PspState.CONFIRM_PENDING, PspState.IN_PROGRESS})

TRANSITIONS: dict[PspState, frozenset[PspState]] = {
    PspState.NEW: frozenset({PspState.QUERY_PENDING}),
    PspState.QUERY_PENDING: frozenset({PspState.QUERIED, PspState.FAILED, PspState.MANUAL_REVIEW}),
    PspState.QUERIED: frozenset({PspState.CONFIRM_PENDING}),
    PspState.CONFIRM_PENDING: frozenset(
        {PspState.COMPLETED, PspState.FAILED, PspState.IN_PROGRESS, PspState.MANUAL_REVIEW}
    ),
    PspState.IN_PROGRESS: frozenset({PspState.COMPLETED, PspState.FAILED, PspState.MANUAL_REVIEW}),
    PspState.MANUAL_REVIEW: frozenset({PspState.COMPLETED, PspState.FAILED}),
    PspState.COMPLETED: frozenset(),
    PspState.FAILED: frozenset(),
}

# How far along each state is: an event (a webhook, a late answer) never moves a transaction to a
# state of lower rank than it holds.
RANK: dict[PspState, int] = {
    PspState.NEW: 0,
    PspState.QUERY_PENDING: 1,
    PspState.QUERIED: 2,
    PspState.CONFIRM_PENDING: 3,
    PspState.IN_PROGRESS: 4,
    PspState.MANUAL_REVIEW: 5,
    PspState.COMPLETED: 6,
    PspState.FAILED: 6,
}


def can_transition(current: PspState, target: PspState) -> bool:
    return target in TRANSITIONS[current]


def transition(current: PspState, target: PspState) -> PspState:
    """`target`, or `InvalidTransitionError` naming both states and the allowed ones."""
    if not can_transition(current, target):
        raise InvalidTransitionError(
            f"a PSP transaction cannot go from {current.value} to {target.value}",
            {
                "from": current.value,
                "to": target.value,
                "allowed": sorted(s.value for s in TRANSITIONS[current]),
            },
        )
    return target


class PspOutcome(StrEnum):
    """What a PSP said about a transfer, in the drivers' common words."""

    COMPLETED = "completed"
    FAILED = "failed"
    PROCESSING = "processing"
    NOT_FOUND = "not_found"  # an inquiry: the PSP has no transfer under our reference
    UNKNOWN = "unknown"  # an answer the driver cannot map: a person must look


def state_of(outcome: PspOutcome) -> PspState | None:
    """The state an answer about a submitted transfer leads to; None: stay and inquire again."""
    return {
        PspOutcome.COMPLETED: PspState.COMPLETED,
        PspOutcome.FAILED: PspState.FAILED,
        PspOutcome.PROCESSING: PspState.IN_PROGRESS,
        PspOutcome.UNKNOWN: PspState.MANUAL_REVIEW,
        PspOutcome.NOT_FOUND: None,
    }[outcome]


def mask(value: str, keep: int = 4) -> str:
    """An account number or PAN with all but its last `keep` characters hidden."""
    if len(value) <= keep:
        return "*" * len(value)
    return "*" * (len(value) - keep) + value[-keep:]
