"""The roles a paymanager process can take, and strict parsing of `WORKER_ROLES`.

The source system ignored an unknown role silently, so a typo (`outbox` for `outbox-worker`) started a
pod that did nothing. Here an unknown name stops start-up with exit code 2 and says what was meant.
"""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    API = "api"
    OUTBOX_WORKER = "outbox-worker"
    PSP_WORKER = "psp-worker"
    INVOICE_EXPIRY = "invoice-expiry"
    SESSION_CLEANUP = "session-cleanup"


DEFAULT_ROLES = "api,outbox-worker"
ALL = "all"

# Names people used for roles that do not exist, and what they meant (source document, section
# "Запрещённые имена ролей", plus `cleanup` from the OrchPay workers).
KNOWN_MISTAKES: dict[str, str] = {
    "outbox": "outbox-worker",
    "psp-ipps": "psp-worker (choose PSPs with PSP_NAMES)",
    "balance-monitor": "psp-worker with BALANCE_MONITOR_ENABLED=true",
    "balance": "psp-worker with BALANCE_MONITOR_ENABLED=true",
    "monitor": "psp-worker with BALANCE_MONITOR_ENABLED=true",
    "invoice": "invoice-expiry",
    "expiry": "invoice-expiry",
    "cleanup": "session-cleanup",
}


class UnknownRoleError(ValueError):
    """`WORKER_ROLES` named a role that does not exist."""

    def __init__(self, unknown: list[str]) -> None:
        self.unknown = unknown
        lines = [f"WORKER_ROLES names unknown role(s): {', '.join(unknown)}."]
        for name in unknown:
            meant = KNOWN_MISTAKES.get(name)
            if meant:
                lines.append(f"  '{name}' is not a role; did you mean {meant}?")
        valid = ", ".join(role.value for role in Role)
        lines.append(f"Valid roles: {valid}, or '{ALL}' for every role.")
        super().__init__("\n".join(lines))


def parse_roles(raw: str | None) -> frozenset[Role]:
    """Parse a comma-separated role list: spaces and empty items are ignored, `all` means every role.

    An empty or missing value means the default `api,outbox-worker`.
    """
    text = DEFAULT_ROLES if raw is None else raw
    names = [item.strip().lower() for item in text.split(",") if item.strip()]
    if not names:
        names = DEFAULT_ROLES.split(",")
    if ALL in names:
        unknown = [name for name in names if name != ALL and name not in Role._value2member_map_]
        if unknown:
            raise UnknownRoleError(unknown)
        return frozenset(Role)
    unknown = [name for name in names if name not in Role._value2member_map_]
    if unknown:
        raise UnknownRoleError(list(dict.fromkeys(unknown)))
    return frozenset(Role(name) for name in names)


def describe(roles: frozenset[Role]) -> list[str]:
    """Roles in their canonical order, for logs and the heartbeat row."""
    return [role.value for role in Role if role in roles]
