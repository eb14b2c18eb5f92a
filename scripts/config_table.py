"""Rewrite the configuration table of README.md from `paymanager.config.Settings`."""

from __future__ import annotations

from pathlib import Path

from paymanager.config import settings_markdown_table

START, END = "<!-- config-table:start -->", "<!-- config-table:end -->"


def main() -> None:
    readme = Path(__file__).resolve().parents[1] / "README.md"
    text = readme.read_text()
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(f"{head}{START}\n{settings_markdown_table()}\n{END}{tail}")


if __name__ == "__main__":
    main()
