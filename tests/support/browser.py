"""Debian's chromium driven by Playwright (Playwright's own browser download is not reachable here).

Absent chromium: the test skips locally and FAILS when CI is set (CI must install it: `make chromium`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

CHROMIUM = Path(os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium"))


def chromium_path() -> str:
    if not CHROMIUM.exists():
        message = (
            f"{CHROMIUM} is missing: the dashboard's browser tests need Debian's chromium (`make chromium`)"
        )
        if os.environ.get("CI"):
            pytest.fail(message + " (CI must provide it)")
        pytest.skip(message)
    return str(CHROMIUM)


def is_local(url: str) -> bool:
    return url.startswith(("http://127.0.0.1", "http://localhost", "data:", "blob:", "about:"))
