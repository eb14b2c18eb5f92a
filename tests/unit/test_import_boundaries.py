"""Dependencies point inward: the libraries and the domain import nothing of the layers above them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "paymanager"

ALWAYS_FORBIDDEN = {"paymanager.runtime", "paymanager.bootstrap", "paymanager.api", "paymanager.cli"}
RULES: dict[str, set[str]] = {
    # The job engine and the ledger are libraries: no payment concepts, no process wiring, no config.
    "jobs": ALWAYS_FORBIDDEN
    | {"paymanager.config", "paymanager.domain", "paymanager.application", "paymanager.adapters"}
    | {"paymanager.ledger"},
    "ledger": ALWAYS_FORBIDDEN
    | {"paymanager.config", "paymanager.domain", "paymanager.application", "paymanager.adapters"}
    | {"paymanager.jobs"},
    # The domain is pure: it imports nothing of ours but itself.
    "domain": ALWAYS_FORBIDDEN
    | {"paymanager.config", "paymanager.application", "paymanager.adapters", "paymanager.db"}
    | {"paymanager.jobs", "paymanager.ledger"},
    "application": ALWAYS_FORBIDDEN,
}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


@pytest.mark.parametrize("package", sorted(RULES))
def test_package_imports_only_inward(package: str) -> None:
    forbidden = RULES[package]
    offences = []
    for path in sorted((SRC / package).rglob("*.py")):
        for module in imported_modules(path):
            if any(module == bad or module.startswith(bad + ".") for bad in forbidden):
                offences.append(f"{path.relative_to(SRC)} imports {module}")
    assert not offences, "\n".join(offences)
