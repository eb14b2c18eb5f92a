"""Settings: defaults, bounds and cross-field rules checked when they are read, so that a value a
later start-up step would refuse is refused here (exit 2 naming the variable), and every documented
variable is read by some code."""

from __future__ import annotations

import base64
import os
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from paymanager.adapters.secret_box import SecretBox
from paymanager.config import Settings, settings_markdown_table
from paymanager.roles import Role

SRC = Path(__file__).resolve().parents[2] / "src" / "paymanager"


def make(**env: str) -> Settings:
    return Settings(_env_file=None, **{k.lower(): v for k, v in env.items()})  # type: ignore[arg-type]


def test_defaults_of_the_source_documents() -> None:
    settings = make()
    assert settings.worker_roles == {Role.API, Role.OUTBOX_WORKER}
    assert settings.outbox_interval_ms == 1_000
    assert settings.psp_names == ("ipps",)
    assert settings.psp_poll_interval_ms == 500
    assert settings.psp_lease_sec == 10
    assert settings.psp_retry_lease_sec == 30
    assert settings.invoice_expiry_sweep_interval_ms == 30_000
    assert settings.invoice_expiry_batch_size == 100
    assert settings.balance_monitor_enabled is False
    assert settings.balance_tick_ms == 60_000
    assert settings.ipps_low_balance_threshold_satang == 100_000
    assert settings.ipps_drift_threshold_satang == 10_000
    assert settings.cleanup_interval_ms == 60_000
    assert settings.cleanup_batch_size == 50
    assert settings.shutdown_timeout_ms == 25_000


def test_environment_variables_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKER_ROLES", "psp-worker, invoice-expiry")
    monkeypatch.setenv("PSP_NAMES", "ipps, wise")
    monkeypatch.setenv("OUTBOX_BATCH_SIZE", "25")
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    assert settings.worker_roles == {Role.PSP_WORKER, Role.INVOICE_EXPIRY}
    assert settings.psp_names == ("ipps", "wise")
    assert settings.outbox_batch_size == 25


def test_out_of_bounds_value_is_refused_with_the_field_name() -> None:
    with pytest.raises(ValidationError) as caught:
        make(OUTBOX_BATCH_SIZE="0")
    assert "outbox_batch_size" in str(caught.value)


def test_non_numeric_value_is_refused() -> None:
    with pytest.raises(ValidationError):
        make(PORT="eighty")


def test_unknown_psp_is_refused() -> None:
    with pytest.raises(ValidationError) as caught:
        make(PSP_NAMES="ipps,paypal")
    assert "unknown PSP ['paypal']" in str(caught.value)


def test_lease_shorter_than_two_heartbeats_is_refused() -> None:
    with pytest.raises(ValidationError) as caught:
        make(JOB_LEASE_MS="5000", JOB_HEARTBEAT_INTERVAL_MS="4000")
    message = str(caught.value)
    assert "JOB_HEARTBEAT_INTERVAL_MS (4000) must be at most half of JOB_LEASE_MS (5000)" in message


def test_retry_lease_shorter_than_lease_is_refused() -> None:
    with pytest.raises(ValidationError) as caught:
        make(PSP_LEASE_SEC="60", PSP_RETRY_LEASE_SEC="30")
    assert "PSP_RETRY_LEASE_SEC (30) is shorter than PSP_LEASE_SEC (60)" in str(caught.value)


def test_pool_bounds_relation_is_checked() -> None:
    with pytest.raises(ValidationError) as caught:
        make(DB_POOL_MIN_SIZE="20", DB_POOL_MAX_SIZE="5")
    assert "DB_POOL_MIN_SIZE (20) is larger than DB_POOL_MAX_SIZE (5)" in str(caught.value)


@pytest.mark.parametrize(
    "env",
    [
        {"PSP_CONFIG_KEK": "c2VjcmV0"},  # seed step: "must decode to 32 bytes"
        {"PSP_CONFIG_KEK_PREVIOUS": "not base64!"},  # seed step: "must be base64 of 32 bytes"
        {"DB_POOL_MIN_SIZE": "1", "DB_POOL_MAX_SIZE": "3"},  # worker start: "max_size must be at least 4"
    ],
)
def test_value_refused_later_by_start_up_is_refused_by_settings(env: dict[str, str]) -> None:
    with pytest.raises(ValidationError):
        make(**env)


def test_the_tigerbeetle_backend_is_accepted_with_every_replica_address() -> None:
    settings = make(LEDGER_BACKEND="tigerbeetle", TB_ADDRESS="10.0.0.1:3000,10.0.0.2:3000,10.0.0.3:3000")
    assert settings.ledger_backend == "tigerbeetle"
    assert settings.tb_address.split(",") == ["10.0.0.1:3000", "10.0.0.2:3000", "10.0.0.3:3000"]


def test_comma_separated_previous_keks_are_accepted_as_secret_box_accepts_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PSP_CONFIG_KEK_PREVIOUS is "comma-separated earlier KEKs" (SecretBox.from_config splits it on
    ','): a deployment after its second key rotation must still start."""
    current, old1, old2 = (base64.b64encode(os.urandom(32)).decode() for _ in range(3))
    previous = f"{old1},{old2}"
    SecretBox.from_config(current, previous)  # what start-up uses: fine
    monkeypatch.setenv("PSP_CONFIG_KEK", current)
    monkeypatch.setenv("PSP_CONFIG_KEK_PREVIOUS", previous)
    Settings(_env_file=None)  # type: ignore[call-arg]


def test_public_view_masks_secrets() -> None:
    kek = "a2tra2tra2tra2tra2tra2tra2tra2tra2tra2tra2s="  # base64 of 32 bytes
    settings = make(DATABASE_URL="postgresql://user:hunter2@db/pm", PSP_CONFIG_KEK=kek)
    view = settings.public_view()
    assert view["DATABASE_URL"] == "********"
    assert view["PSP_CONFIG_KEK"] == "********"
    assert "hunter2" not in repr(view)
    assert "hunter2" not in repr(settings)


def test_markdown_table_lists_every_variable() -> None:
    table = settings_markdown_table()
    for name in Settings.model_fields:
        assert f"`{name.upper()}`" in table


# Variables read only outside the package's Python code (the TigerBeetle client reads its address and
# cluster id through the ledger's connect step, by name).
RESERVED = {"tb_address", "tb_cluster_id"}


def test_every_documented_variable_is_read_by_some_code() -> None:
    code = "\n".join(path.read_text() for path in SRC.rglob("*.py") if path.name != "config.py")
    unread = [
        name for name in Settings.model_fields if name not in RESERVED and not re.search(rf"\.{name}\b", code)
    ]
    assert unread == [], f"documented in the README but never read: {[n.upper() for n in unread]}"
