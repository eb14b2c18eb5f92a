"""Policies: limits per channel (and optionally per service) that a request must satisfy.

Every policy that matches a request applies: the channel-wide one (no service) and the one of the
calling service. The first rule that refuses names itself, so a 422 says exactly what to change.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from paymanager.domain.errors import PolicyViolationError
from paymanager.domain.money import Money


class PolicyRule(StrEnum):
    CURRENCIES = "currencies"
    MIN_AMOUNT = "min_amount"
    MAX_AMOUNT = "max_amount"
    DAILY_VOLUME_PER_ACCOUNT = "daily_volume_per_account"


@dataclass(frozen=True, slots=True)
class Policy:
    id: str
    channel: str
    service_id: str | None
    min_amount: int | None = None
    max_amount: int | None = None
    daily_volume_per_account: int | None = None
    currencies: frozenset[str] | None = None

    def applies_to(self, channel: str, service_id: str) -> bool:
        return self.channel == channel and self.service_id in (None, service_id)


def _violation(policy: Policy, rule: PolicyRule, message: str, limit: object, actual: object) -> None:
    raise PolicyViolationError(
        message,
        {
            "policy_id": policy.id,
            "rule": rule.value,
            "channel": policy.channel,
            "service_id": policy.service_id,
            "limit": limit,
            "actual": actual,
        },
    )


def check(policy: Policy, amount: Money, daily_volume_used: int) -> None:
    """Raise `PolicyViolationError` for the first rule of `policy` that refuses `amount`.

    `daily_volume_used` is what the payer account already committed today on this channel.
    """
    if policy.currencies is not None and amount.currency not in policy.currencies:
        _violation(
            policy,
            PolicyRule.CURRENCIES,
            f"currency {amount.currency} is not allowed on {policy.channel}",
            sorted(policy.currencies),
            amount.currency,
        )
    if policy.min_amount is not None and amount.amount < policy.min_amount:
        _violation(
            policy, PolicyRule.MIN_AMOUNT, "amount is below the minimum", policy.min_amount, amount.amount
        )
    if policy.max_amount is not None and amount.amount > policy.max_amount:
        _violation(
            policy, PolicyRule.MAX_AMOUNT, "amount is above the maximum", policy.max_amount, amount.amount
        )
    limit = policy.daily_volume_per_account
    if limit is not None and daily_volume_used + amount.amount > limit:
        _violation(
            policy,
            PolicyRule.DAILY_VOLUME_PER_ACCOUNT,
            "the payer account's daily volume on this channel would exceed the limit",
            limit,
            daily_volume_used + amount.amount,
        )


def check_all(policies: list[Policy], amount: Money, daily_volume_used: int) -> None:
    """Apply every policy in order (channel-wide first, then the service's)."""
    for policy in sorted(policies, key=lambda p: p.service_id is not None):
        check(policy, amount, daily_volume_used)


def needs_daily_volume(policies: list[Policy]) -> bool:
    return any(p.daily_volume_per_account is not None for p in policies)
