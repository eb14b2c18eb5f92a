"""How many examples the property tests draw: their committed counts, scaled for stress runs.

`HYPOTHESIS_EXAMPLES_SCALE=10 pytest tests/unit` draws ten times the examples of every property test
(with `--hypothesis-seed` to vary them); unset, every test keeps the count written beside it, so the
suite's time does not change.
"""

from __future__ import annotations

import os

from hypothesis import settings

EXAMPLES_SCALE = int(os.environ.get("HYPOTHESIS_EXAMPLES_SCALE", "1"))
assert EXAMPLES_SCALE >= 1, "HYPOTHESIS_EXAMPLES_SCALE is a whole number of at least 1"

# Hypothesis's own default, which the tests without a count of their own draw.
DEFAULT_EXAMPLES = 100


def examples(count: int) -> int:
    """`count`, times the stress scale."""
    return count * EXAMPLES_SCALE


def load_scaled_profile() -> None:
    """Scale the tests that keep Hypothesis's default count (called once, from the root conftest)."""
    if EXAMPLES_SCALE > 1:
        settings.register_profile("scaled", max_examples=examples(DEFAULT_EXAMPLES), deadline=None)
        settings.load_profile("scaled")
