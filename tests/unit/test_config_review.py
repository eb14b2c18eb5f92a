"""config.py where a review found it broken (each test failed before its fix, 2026-11-29): values
`Settings` accepted that a later start-up step refused (exit 1 instead of 2), and a variable the
README documented that no code read (JOB_MAX_PAYLOAD_BYTES, removed)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from paymanager.config import Settings

SRC = Path(__file__).resolve().parents[2] / "src" / "paymanager"


def make(**env: str) -> Settings:
    return Settings(_env_file=None, **{k.lower(): v for k, v in env.items()})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "env",
    [
        {"PSP_CONFIG_KEK": "c2VjcmV0"},  # seed step: "must decode to 32 bytes"
        {"PSP_CONFIG_KEK_PREVIOUS": "not base64!"},  # seed step: "must be base64 of 32 bytes"
        {"LEDGER_BACKEND": "tigerbeetle"},  # connect-ledger step: "payments need LEDGER_BACKEND=postgres"
        {"DB_POOL_MIN_SIZE": "1", "DB_POOL_MAX_SIZE": "3"},  # worker start: "max_size must be at least 4"
    ],
)
def test_value_refused_later_by_start_up_is_refused_by_settings(env: dict[str, str]) -> None:
    with pytest.raises(ValidationError):
        make(**env)


# Variables of roles the README marks as not built yet (psp-worker, balance monitor, session-cleanup),
# and of the TigerBeetle backend, which config.py refuses until it is wired to payments.
RESERVED = {
    "tb_address", "tb_cluster_id",
    "psp_names", "psp_poll_interval_ms", "psp_lease_sec", "psp_retry_lease_sec", "psp_max_retries",
    "balance_monitor_enabled", "balance_tick_ms", "ipps_low_balance_threshold_satang",
    "ipps_drift_threshold_satang", "cleanup_interval_ms", "cleanup_batch_size",
}  # fmt: skip


def test_every_documented_variable_is_read_by_some_code() -> None:
    code = "\n".join(path.read_text() for path in SRC.rglob("*.py") if path.name != "config.py")
    unread = [
        name for name in Settings.model_fields if name not in RESERVED and not re.search(rf"\.{name}\b", code)
    ]
    assert unread == [], f"documented in the README but never read: {[n.upper() for n in unread]}"
