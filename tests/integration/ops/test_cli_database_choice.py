"""A CLI command run where no embedded database lives refuses and names where it looked, instead of
creating an empty database there and reporting on it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_a_command_in_another_directory_does_not_create_an_embedded_database(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "EMBEDDED_PG_DIR")}
    for args in (["jobs", "ls"], ["ledger", "verify"], ["jobs", "migrate"]):
        result = subprocess.run(
            [sys.executable, "-m", "paymanager", *args], cwd=tmp_path, env=env, capture_output=True,
            text=True, timeout=60, check=False,
        )  # fmt: skip
        assert result.returncode == 2, (args, result.stderr)
        assert f"no embedded database in {tmp_path.resolve()}/.paymanager/pg" in result.stderr
        assert "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_migrate_without_a_database_url_says_which_embedded_database_it_migrates(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "EMBEDDED_PG_DIR")}
    here = tmp_path / "here"
    here.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "paymanager", "migrate"], cwd=here, env=env, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"migrating the embedded database in {here.resolve()}/.paymanager/pg" in result.stderr
    # The one it created is the current directory's, and nothing was written beside it.
    assert (here / ".paymanager" / "pg").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["here"]
