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


# --- no import cycle between the package's modules ----------------------------------------------


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(path): path for path in sorted(SRC.rglob("*.py"))}


def imports_of(path: Path) -> set[str]:
    """The package's modules `path` imports, anywhere in it (inside functions and TYPE_CHECKING
    blocks too: a cycle hidden in a function is still a cycle of the design)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from package import module` imports the module; `from module import name` the module.
            names = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
            names = [n for n in names[:-1] if n in MODULES] or [node.module]
        for name in names:
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name.startswith("paymanager"):
                found.add(name)
    return found


def import_cycles() -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan's algorithm), and self-imports."""
    graph = {name: imports_of(path) - {name} for name, path in MODULES.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return cycles


def test_no_import_cycle_between_the_packages_modules() -> None:
    cycles = import_cycles()
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(group) for group in cycles)


def test_the_cycle_check_finds_a_cycle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check itself: two modules importing each other (one inside a function) are a cycle."""
    package = tmp_path / "paymanager"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from paymanager.b import g\n")
    (package / "b.py").write_text("def g() -> None:\n    from paymanager import a\n")
    monkeypatch.setattr(__import__(__name__, fromlist=["SRC"]), "SRC", package)
    monkeypatch.setattr(
        __import__(__name__, fromlist=["MODULES"]),
        "MODULES",
        {module_name(path): path for path in sorted(package.rglob("*.py"))},
    )
    assert import_cycles() == [["paymanager.a", "paymanager.b"]]


# --- no Any in the public signatures of stores and use cases -----------------------------------


def _mentions_any(annotation: ast.expr | None) -> bool:
    if annotation is None:
        return False
    return any(
        (isinstance(node, ast.Name) and node.id == "Any")
        or (isinstance(node, ast.Attribute) and node.attr == "Any")
        or (isinstance(node, ast.Constant) and isinstance(node.value, str) and "Any" in node.value)
        for node in ast.walk(annotation)
    )


def any_in_public_signatures(path: Path) -> list[str]:
    """`function(param)` for each public function or method of `path` whose signature says Any."""
    offences: list[str] = []

    def check(body: list[ast.stmt], owner: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                check(node.body, f"{node.name}.")
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not node.name.startswith("_"):
                args = node.args
                params = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
                for param in params:
                    if param is not None and _mentions_any(param.annotation):
                        offences.append(f"{owner}{node.name}({param.arg})")
                if _mentions_any(node.returns):
                    offences.append(f"{owner}{node.name} -> ...")

    check(ast.parse(path.read_text(), filename=str(path)).body, "")
    return offences


def test_stores_and_use_cases_say_what_they_take_and_return() -> None:
    offences = [
        f"{path.relative_to(SRC)}: {offence}"
        for path in sorted((SRC / "application").rglob("*.py"))
        for offence in any_in_public_signatures(path)
    ]
    assert not offences, "Any in public signatures:\n" + "\n".join(offences)


def test_the_any_check_finds_any(tmp_path: Path) -> None:
    module = tmp_path / "store.py"
    module.write_text(
        "from typing import Any\n"
        "class Store:\n"
        "    async def get(self, *, key: str) -> dict[str, Any]: ...\n"
        "    def _row(self, row: Any) -> None: ...\n"
        "def find(rows: list[Any]) -> None: ...\n"
    )
    assert any_in_public_signatures(module) == ["Store.get -> ...", "find(rows)"]
