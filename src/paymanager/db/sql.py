"""Named SQL statements, loaded once from `.sql` files (procrastinate's `queries.sql` pattern).

A file holds blocks that start with a line `-- name: noun_verb` and run until the next such line:

    -- name: job_claim_batch
    -- Claims up to $2 available jobs of queue $1.
    WITH ... ;

Every runtime statement of a package lives in its file, grouped by table, and is called by name.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import LiteralString, cast

_NAME_LINE = re.compile(r"^--\s*name:\s*([a-z][a-z0-9_]*)\s*$")


class Queries(dict[str, LiteralString]):
    """Statements by name; a missing name is a programmer error with a helpful message."""

    def __init__(self, source: str, statements: dict[str, LiteralString]) -> None:
        super().__init__(statements)
        self.source = source

    def __missing__(self, name: str) -> LiteralString:
        known = ", ".join(sorted(self))
        raise KeyError(f"no statement named {name!r} in {self.source}; known: {known}")


def parse_queries(text: str, source: str = "<string>") -> Queries:
    statements: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        match = _NAME_LINE.match(line.strip())
        if match:
            name = match.group(1)
            if name in statements:
                raise ValueError(f"{source}: statement {name!r} is defined twice")
            current = statements[name] = []
            continue
        if current is not None:
            current.append(line)
    cleaned: dict[str, LiteralString] = {}
    for name, lines in statements.items():
        body = "\n".join(line for line in lines if not line.strip().startswith("--")).strip()
        if not body:
            raise ValueError(f"{source}: statement {name!r} is empty")
        cleaned[name] = cast(LiteralString, body.rstrip(";").strip())  # type: ignore[redundant-cast]
    return Queries(source, cleaned)


def load_queries(package: str, filename: str) -> Queries:
    """Load `filename` shipped inside `package` (e.g. `load_queries("paymanager.jobs", "jobs.sql")`)."""
    text = resources.files(package).joinpath(filename).read_text(encoding="utf-8")
    return parse_queries(text, f"{package}/{filename}")
