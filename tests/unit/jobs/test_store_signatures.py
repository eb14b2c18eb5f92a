"""The job store's public surface is typed: no `Any` in its functions' signatures or its dataclasses."""

from __future__ import annotations

import dataclasses
import inspect
import typing

from paymanager.jobs import _store


def _public_members() -> list[tuple[str, object]]:
    return [
        (name, member)
        for name, member in vars(_store).items()
        if not name.startswith("_") and getattr(member, "__module__", None) == _store.__name__
    ]


def _mentions_any(annotation: object) -> bool:
    if annotation is typing.Any:
        return True
    return any(_mentions_any(arg) for arg in typing.get_args(annotation))


def test_the_store_functions_and_dataclasses_declare_no_any() -> None:
    offenders: list[str] = []
    checked = 0
    for name, member in _public_members():
        if inspect.isfunction(member) or dataclasses.is_dataclass(member):
            hints = typing.get_type_hints(member)
        else:
            continue
        checked += 1
        offenders += [f"{name}.{param}" for param, hint in hints.items() if _mentions_any(hint)]
    assert checked >= 30
    assert offenders == []


# A claimed Job is made once per job on the worker's hot path, where a frozen dataclass's
# object.__setattr__ per field costs most of its making; the worker only reads it.
NOT_FROZEN = {"Job"}


def test_every_statement_the_store_returns_rows_of_comes_back_as_a_frozen_dataclass() -> None:
    for name, member in _public_members():
        if dataclasses.is_dataclass(member) and isinstance(member, type):
            frozen = member.__dataclass_params__.frozen  # type: ignore[attr-defined]
            assert frozen != (name in NOT_FROZEN), name
