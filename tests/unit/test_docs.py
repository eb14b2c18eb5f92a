from __future__ import annotations

from pathlib import Path

from paymanager.config import settings_markdown_table

ROOT = Path(__file__).resolve().parents[2]


def test_readme_configuration_table_matches_config_py() -> None:
    readme = (ROOT / "README.md").read_text()
    start = readme.index("<!-- config-table:start -->") + len("<!-- config-table:start -->")
    end = readme.index("<!-- config-table:end -->")
    assert readme[start:end].strip() == settings_markdown_table().strip(), (
        "README's configuration table is stale: run `make docs` (paymanager config --markdown)"
    )


def test_readme_starts_with_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    first_block = readme.split("```bash", 1)[1].split("```", 1)[0]
    assert "make run" in first_block
    assert "make test" in first_block
    assert "make test" in (ROOT / ".ci" / "run").read_text()
