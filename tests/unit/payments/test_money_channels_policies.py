"""Money, channel fee rules and parties, and policy rules: pure domain behaviour."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from paymanager.domain.channels import (
    DEFAULT_CHANNELS,
    AccountKind,
    ChannelName,
    FeeRule,
    default_registry,
)
from paymanager.domain.errors import (
    AccountKindNotAllowedError,
    CurrencyMismatchError,
    InvalidAmountError,
    InvalidInputError,
    PolicyViolationError,
    SameAccountError,
    ScopeRequiredError,
    UnknownChannelError,
    UnknownCurrencyError,
)
from paymanager.domain.money import MAX_AMOUNT_MINOR, Money, positive
from paymanager.domain.policies import Policy, check, check_all


def test_money_refuses_floats_bools_negatives_and_unknown_currencies() -> None:
    with pytest.raises(InvalidAmountError):
        Money(1.5, "THB")  # type: ignore[arg-type]
    with pytest.raises(InvalidAmountError):
        Money(True, "THB")
    with pytest.raises(InvalidAmountError):
        Money(-1, "THB")
    with pytest.raises(InvalidAmountError):
        Money(MAX_AMOUNT_MINOR + 1, "THB")
    with pytest.raises(UnknownCurrencyError):
        Money(1, "XXX")
    with pytest.raises(InvalidAmountError):
        positive(0, "THB")


def test_money_of_different_currencies_does_not_add() -> None:
    with pytest.raises(CurrencyMismatchError):
        Money(1, "THB") + Money(1, "USD")


@given(
    st.integers(min_value=1, max_value=MAX_AMOUNT_MINOR),
    st.integers(min_value=0, max_value=10_000),
    st.integers(min_value=0, max_value=10_000),
    st.integers(min_value=0, max_value=1_000),
)
def test_fee_is_within_its_bounds_and_never_below_its_rate(
    amount: int, bps: int, fixed: int, floor: int
) -> None:
    rule = FeeRule(fixed_minor=fixed, rate_bps=bps, min_minor=floor, max_minor=floor + 50_000)
    fee = rule.fee_for(amount)
    assert floor <= fee <= floor + 50_000
    if fee < floor + 50_000:
        assert fee * 10_000 >= amount * bps


@given(st.integers(min_value=1, max_value=10**9))
def test_quote_total_is_amount_plus_fee(amount: int) -> None:
    for channel in DEFAULT_CHANNELS:
        quote = channel.quote(positive(amount, "THB"))
        assert quote.total.amount == amount + quote.fee.amount


def test_registry_knows_the_five_channels_and_refuses_others() -> None:
    registry = default_registry()
    assert set(registry.names()) == {c.value for c in ChannelName}
    with pytest.raises(UnknownChannelError):
        registry.get("wire")


def test_admin_transfer_requires_the_admin_scope() -> None:
    channel = default_registry().get("admin-transfer")
    with pytest.raises(ScopeRequiredError):
        channel.check_scope(frozenset())
    channel.check_scope(frozenset({"admin"}))


def test_parties_are_checked_by_kind_and_presence() -> None:
    p2p = default_registry().get("internal-p2p")
    p2p.check_parties(("a", AccountKind.USER), ("b", AccountKind.MERCHANT))
    with pytest.raises(AccountKindNotAllowedError):
        p2p.check_parties(("a", AccountKind.MERCHANT), ("b", AccountKind.USER))
    with pytest.raises(SameAccountError):
        p2p.check_parties(("a", AccountKind.USER), ("a", AccountKind.USER))
    with pytest.raises(InvalidInputError):
        p2p.check_parties(None, ("b", AccountKind.USER))
    ipps = default_registry().get("ipps-transfer")
    with pytest.raises(InvalidInputError):
        ipps.check_parties(("a", AccountKind.USER), ("b", AccountKind.USER))
    ipps.check_parties(("a", AccountKind.USER), None)


def _policy(**limits: object) -> Policy:
    return Policy(id="p1", channel="internal-p2p", service_id=None, **limits)  # type: ignore[arg-type]


def test_each_rule_refuses_with_its_own_name() -> None:
    cases = [
        (_policy(currencies=frozenset({"USD"})), Money(10, "THB"), 0, "currencies"),
        (_policy(min_amount=100), Money(10, "THB"), 0, "min_amount"),
        (_policy(max_amount=5), Money(10, "THB"), 0, "max_amount"),
        (_policy(daily_volume_per_account=100), Money(10, "THB"), 95, "daily_volume_per_account"),
    ]
    for policy, amount, used, rule in cases:
        with pytest.raises(PolicyViolationError) as refused:
            check(policy, amount, used)
        assert refused.value.details["rule"] == rule
        assert refused.value.details["policy_id"] == "p1"


def test_amounts_inside_every_limit_pass() -> None:
    policy = _policy(
        min_amount=1, max_amount=100, daily_volume_per_account=1_000, currencies=frozenset({"THB"})
    )
    check_all([policy], Money(100, "THB"), 900)
