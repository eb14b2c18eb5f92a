"""What every command uses: the settings from the environment, failing with a message and an exit
code, and running a coroutine."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from typing import Any, NoReturn, TypeVar

import typer
from pydantic import ValidationError

from paymanager.config import Settings
from paymanager.roles import UnknownRoleError, parse_roles

EXIT_CONFIG = 2
T = TypeVar("T")


def fail(message: str, code: int = 1) -> NoReturn:
    typer.echo(message, err=True)
    raise typer.Exit(code)


def load_settings() -> Settings:
    """Settings from the environment; a bad value exits 2 with a message a person can act on."""
    try:
        # Parse the roles first so a typo gets its own message rather than pydantic's wrapping.
        parse_roles(os.environ.get("WORKER_ROLES"))
        return Settings()
    except UnknownRoleError as exc:
        fail(str(exc), EXIT_CONFIG)
    except ValidationError as exc:
        lines = ["invalid configuration:"]
        for err in exc.errors():
            where = ".".join(str(part) for part in err["loc"]).upper() or "settings"
            message = str(err["msg"]).removeprefix("Value error, ")
            lines.append(f"  {where}: {message}")
        fail("\n".join(lines), EXIT_CONFIG)


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on uvloop where it is installed (its loop turns are cheaper, and a worker's
    time goes to loop turns between round trips; `bench/driver.py --loop` compares), else on the
    standard event loop."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - Windows
        return asyncio.run(coro)
    return uvloop.run(coro)
