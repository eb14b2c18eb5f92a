"""Checkout sessions' configuration: enabled without a provider is a start-up error, never a stand-in."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from paymanager.config import Settings


def make(**env: str) -> Settings:
    return Settings(_env_file=None, **{k.lower(): v for k, v in env.items()})  # type: ignore[arg-type]


def test_sessions_are_off_by_default_and_need_no_provider() -> None:
    settings = make()
    assert settings.sessions_enabled is False
    assert settings.cleanup_interval_ms == 60_000
    assert settings.cleanup_batch_size == 50


@pytest.mark.parametrize(
    ("env", "missing"),
    [
        ({}, "GIFTCARD_BASE_URL"),
        ({"CARD_BASE_URL": "http://card"}, "GIFTCARD_BASE_URL"),
        ({"GIFTCARD_BASE_URL": "http://gift"}, "CARD_BASE_URL"),
    ],
)
def test_sessions_enabled_without_a_provider_refuse_to_start(env: dict[str, str], missing: str) -> None:
    with pytest.raises(ValidationError) as refused:
        make(SESSIONS_ENABLED="true", **env)
    assert f"SESSIONS_ENABLED=true needs {missing}" in str(refused.value)
    assert "paymanager sandbox" in str(refused.value)


def test_sessions_enabled_with_both_providers_is_accepted() -> None:
    settings = make(SESSIONS_ENABLED="true", GIFTCARD_BASE_URL="http://gift", CARD_BASE_URL="http://card")
    assert settings.sessions_enabled


def test_a_default_ttl_longer_than_the_maximum_is_refused() -> None:
    with pytest.raises(ValidationError, match="SESSION_DEFAULT_TTL_SEC"):
        make(SESSION_DEFAULT_TTL_SEC="7200", SESSION_MAX_TTL_SEC="3600")
