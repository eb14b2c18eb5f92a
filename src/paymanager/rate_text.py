"""Rate limits written as text (`100/1s`, `5/500ms`, `off`): one parser for settings, the CLI and the engine.

It lives apart from jobs/ because config.py validates PSP_RATE_LIMIT with it, and the configuration
imports nothing that imports it back.
"""

from __future__ import annotations

import re

_RATE_TEXT = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*(ms|s|m|h)\s*$")
_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000}


def parse_rate_limit(text: str) -> tuple[int, int] | None:
    """`N/WINDOW` (`100/1s`, `5/500ms`, `600/m`, `1000/1h`) as (max_jobs, window_ms); `off`: None."""
    if text.strip().lower() == "off":
        return None
    match = _RATE_TEXT.match(text.lower())
    if match is None:
        raise ValueError(f"rate limit {text!r} must read N/WINDOW (100/1s, 5/500ms, 600/1m) or off")
    window_ms = int(match.group(2) or 1) * _UNIT_MS[match.group(3)]
    return int(match.group(1)), window_ms


def format_rate_limit(max_jobs: int, window_ms: int) -> str:
    """The inverse of parse_rate_limit, in the largest unit that divides the window."""
    for unit in ("h", "m", "s"):
        if window_ms % _UNIT_MS[unit] == 0:
            return f"{max_jobs}/{window_ms // _UNIT_MS[unit]}{unit}"
    return f"{max_jobs}/{window_ms}ms"
