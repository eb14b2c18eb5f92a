"""The list of `make mutate` stays applicable: each breakage still finds its line, and its tests exist.

`make mutate` itself is slow (it runs the named tests once per mutation) and stays out of CI; this
check is fast, so an entry the code moved away from fails CI instead of quietly breaking nothing."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _mutate_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mutate", ROOT / "scripts" / "mutate.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["mutate"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_every_mutation_finds_its_original_exactly_once_and_names_existing_tests() -> None:
    mutate = _mutate_script()
    mutations = mutate.load()
    assert mutations
    assert [problem for mutation in mutations for problem in mutate.problems(mutation)] == []
    assert len({m.name for m in mutations}) == len(mutations), "two mutations share a name"


def test_a_stale_entry_is_reported(tmp_path: Path) -> None:
    mutate = _mutate_script()
    (tmp_path / "code.sql").write_text("SELECT 1 FOR UPDATE;\nSELECT 2 FOR UPDATE;\n")
    (tmp_path / "test_code.py").write_text("def test_locks() -> None: ...\n")
    twice = mutate.Mutation("twice", "code.sql", "FOR UPDATE", "", ["test_code.py::test_locks"], "why")
    gone = mutate.Mutation("gone", "code.sql", "SKIP LOCKED", "", ["test_code.py::test_renamed"], "why")
    assert mutate.problems(twice, tmp_path) == ["twice: its original is found 2 times in code.sql, not once"]
    assert mutate.problems(gone, tmp_path) == [
        "gone: its original is found 0 times in code.sql, not once",
        "gone: test_code.py has no test test_renamed",
    ]
