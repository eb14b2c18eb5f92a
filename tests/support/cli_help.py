"""The `paymanager` command tree as click sees it: every leaf command and the examples its help gives."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from typing import Any

import typer.main

from paymanager.cli import app

# An example is a `paymanager ...` command in backquotes in a help text.
EXAMPLE = re.compile(r"`(paymanager [^`]+)`")


def _walk(command: Any, path: list[str]) -> Iterator[tuple[str, Any, list[Any]]]:
    """(name, command, its groups from the root) of every leaf."""
    subcommands = getattr(command, "commands", None)
    if subcommands is None:
        yield " ".join(path), command, []
        return
    for name, sub in subcommands.items():
        for leaf, cmd, groups in _walk(sub, [*path, name]):
            yield leaf, cmd, [command, *groups]


def leaf_commands() -> dict[str, Any]:
    return {name: cmd for name, cmd, _ in _walk(typer.main.get_command(app), [])}


def help_examples() -> list[list[str]]:
    """Every example in the help of every command, group and option, as argv (without `paymanager`)."""
    texts: list[str] = []
    for _, command, groups in _walk(typer.main.get_command(app), []):
        for owner in [*groups, command]:
            texts.append(owner.help or "")
            texts.extend(getattr(param, "help", None) or "" for param in owner.params)
    found: list[list[str]] = []
    for text in texts:
        for example in EXAMPLE.findall(" ".join(text.split())):
            argv = shlex.split(example)[1:]
            if argv not in found:
                found.append(argv)
    return found
