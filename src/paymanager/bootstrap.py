"""Wires the components this build ships into the runtime's start-up steps.

Each component contributes named steps to `StartupHooks`; the runtime decides the order. Adding a
component means adding its `install_*` call here, nowhere else.
"""

from __future__ import annotations

from paymanager.runtime import StartupHooks


def install(hooks: StartupHooks) -> None:
    """Register every component's start-up steps and role workers."""
    del hooks  # Filled by the job engine, ledger and payments components as they land.
