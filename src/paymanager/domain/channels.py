"""Channels: the kinds of money movement, which accounts each moves, its fee rule and its rules.

A channel is a value; the registry of the channels a process serves is filled at start-up (the
runtime's `register channels` step) so every role, headless ones included, sees the same set.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum

from paymanager.domain.errors import (
    AccountKindNotAllowedError,
    InvalidInputError,
    SameAccountError,
    ScopeRequiredError,
    UnknownChannelError,
)
from paymanager.domain.money import Money

ADMIN_SCOPE = "admin"
BPS_DENOMINATOR = 10_000


class AccountKind(StrEnum):
    USER = "user"
    MERCHANT = "merchant"
    SYSTEM = "system"


class ChannelName(StrEnum):
    INTERNAL_P2P = "internal-p2p"
    IPPS_TRANSFER = "ipps-transfer"
    QP_TRANSFER = "qp-transfer"
    WISE_TRANSFER = "wise-transfer"
    SERVICE_TRANSFER = "service-transfer"
    ADMIN_TRANSFER = "admin-transfer"
    MERCHANT_INVOICE = "merchant-invoice"


class SystemAccount(StrEnum):
    """System accounts that exist once per currency, named `system.<role>.<CCY>`."""

    FUNDING = "funding"  # the source of admin-transfer: money entering the platform
    FEES = "fees"  # fee revenue
    # Money paid out through each PSP, mirrored by that PSP's partner balance (the balance monitor).
    NOSTRO_IPPS = "nostro.ipps"
    NOSTRO_QP = "nostro.qp"
    NOSTRO_WISE = "nostro.wise"


NOSTRO_ACCOUNTS = (SystemAccount.NOSTRO_IPPS, SystemAccount.NOSTRO_QP, SystemAccount.NOSTRO_WISE)


# Every intent with a fee credits a fee account when it is held and when it settles, and the ledger
# locks that account's row until the transaction commits: one fee account per currency would make
# every settlement wait for the previous one. Fees are spread over this many shards instead
# (`system.fees.THB.0` ... `.63`); fee revenue is the sum of the shards.
FEE_SHARDS = 64


def system_account_name(role: SystemAccount, currency: str, shard: int | None = None) -> str:
    suffix = "" if shard is None else f".{shard}"
    return f"system.{role.value}.{currency}{suffix}"


def system_account_names(currency: str) -> list[str]:
    """Every system account of a currency: funding, the fee shards, one nostro per PSP."""
    return [
        system_account_name(SystemAccount.FUNDING, currency),
        *(system_account_name(SystemAccount.FEES, currency, shard) for shard in range(FEE_SHARDS)),
        *(system_account_name(nostro, currency) for nostro in NOSTRO_ACCOUNTS),
    ]


@dataclass(frozen=True, slots=True)
class FeeRule:
    """fee = clamp(fixed + ceil(amount x rate_bps / 10,000), min, max); all in minor units."""

    fixed_minor: int = 0
    rate_bps: int = 0
    min_minor: int = 0
    max_minor: int | None = None

    def __post_init__(self) -> None:
        assert self.fixed_minor >= 0
        assert self.min_minor >= 0
        assert 0 <= self.rate_bps <= BPS_DENOMINATOR
        assert self.max_minor is None or self.max_minor >= self.min_minor

    def fee_for(self, amount: int) -> int:
        # Ceiling division so a fee never rounds down to less than its rate.
        variable = -(-amount * self.rate_bps // BPS_DENOMINATOR)
        fee = max(self.fixed_minor + variable, self.min_minor)
        return fee if self.max_minor is None else min(fee, self.max_minor)


@dataclass(frozen=True, slots=True)
class Quote:
    channel: ChannelName
    amount: Money
    fee: Money
    total: Money


@dataclass(frozen=True, slots=True)
class Channel:
    """One kind of movement.

    `payer_kinds`/`payee_kinds` list the account kinds allowed on each side; a side named by
    `payer_system`/`payee_system` is a system account chosen by the channel, never by the caller.
    """

    name: ChannelName
    description: str
    fee: FeeRule
    payer_kinds: frozenset[AccountKind] = frozenset()
    payee_kinds: frozenset[AccountKind] = frozenset()
    payer_system: SystemAccount | None = None
    payee_system: SystemAccount | None = None
    required_scope: str | None = None
    # False for channels whose next step is outside paymanager's ledger (a PSP payout).
    settles_on_confirm: bool = True
    expires: bool = False
    # True for channels where a merchant is paid and may capture a hold later (`capture_method=manual`).
    manual_capture: bool = False
    # The PSP that pays a payout channel's intents out (its queue `psp.<psp>`); None for the others.
    psp: str | None = None

    def quote(self, amount: Money) -> Quote:
        fee = Money(self.fee.fee_for(amount.amount), amount.currency)
        return Quote(self.name, amount, fee, amount + fee)

    def check_scope(self, scopes: frozenset[str]) -> None:
        if self.required_scope is not None and self.required_scope not in scopes:
            raise ScopeRequiredError(
                f"channel {self.name.value} requires the {self.required_scope} scope",
                {"channel": self.name.value, "scope": self.required_scope},
            )

    def check_parties(
        self, payer: tuple[object, AccountKind] | None, payee: tuple[object, AccountKind] | None
    ) -> None:
        """Refuse a missing, superfluous or wrongly-kinded account on either side."""
        self._check_side("payer", payer, self.payer_kinds, self.payer_system)
        self._check_side("payee", payee, self.payee_kinds, self.payee_system)
        if payer is not None and payee is not None and payer[0] == payee[0]:
            raise SameAccountError(
                "payer and payee must be different accounts", {"account_id": str(payer[0])}
            )

    def _check_side(
        self,
        side: str,
        party: tuple[object, AccountKind] | None,
        kinds: frozenset[AccountKind],
        system: SystemAccount | None,
    ) -> None:
        if system is not None:
            if party is not None:
                raise InvalidInputError(
                    f"channel {self.name.value} chooses the {side} itself; do not send {side}_account_id",
                    {"channel": self.name.value, "field": f"{side}_account_id"},
                )
            return
        if party is None:
            raise InvalidInputError(
                f"channel {self.name.value} needs {side}_account_id",
                {"channel": self.name.value, "field": f"{side}_account_id"},
            )
        if party[1] not in kinds:
            raise AccountKindNotAllowedError(
                f"channel {self.name.value} does not accept a {party[1].value} account as {side}",
                {"channel": self.name.value, side: party[1].value, "allowed": sorted(k.value for k in kinds)},
            )


_PEOPLE = frozenset({AccountKind.USER, AccountKind.MERCHANT})

DEFAULT_CHANNELS: tuple[Channel, ...] = (
    Channel(
        ChannelName.INTERNAL_P2P,
        "A user pays another user or a merchant inside the platform.",
        FeeRule(rate_bps=50, min_minor=1, max_minor=10_000),
        payer_kinds=frozenset({AccountKind.USER}),
        payee_kinds=_PEOPLE,
        manual_capture=True,
    ),
    *(
        Channel(
            name,
            f"A payout from a user or merchant account through the {label} PSP. Confirming holds the "
            "funds; the intent then stays confirmed, awaiting the PSP, until the PSP's answer settles "
            f"it into system.{nostro.value}.<CCY> or fails it.",
            FeeRule(fixed_minor=1_000),
            payer_kinds=_PEOPLE,
            payee_system=nostro,
            settles_on_confirm=False,
            psp=psp,
        )
        for name, label, psp, nostro in (
            (ChannelName.IPPS_TRANSFER, "IPPS", "ipps", SystemAccount.NOSTRO_IPPS),
            (ChannelName.QP_TRANSFER, "QP", "qp", SystemAccount.NOSTRO_QP),
            (ChannelName.WISE_TRANSFER, "Wise", "wise", SystemAccount.NOSTRO_WISE),
        )
    ),
    Channel(
        ChannelName.SERVICE_TRANSFER,
        "A merchant (a service's account) pays a user: refunds, rewards, payouts inside the platform.",
        FeeRule(),
        payer_kinds=frozenset({AccountKind.MERCHANT}),
        payee_kinds=_PEOPLE,
    ),
    Channel(
        ChannelName.ADMIN_TRANSFER,
        "Money enters the platform from the funding account (admin scope only): top-ups, corrections.",
        FeeRule(),
        payer_system=SystemAccount.FUNDING,
        payee_kinds=_PEOPLE,
        required_scope=ADMIN_SCOPE,
    ),
    Channel(
        ChannelName.MERCHANT_INVOICE,
        "A merchant invoices a user; the user confirms before expires_at or the invoice expires.",
        FeeRule(rate_bps=100, max_minor=50_000),
        payer_kinds=frozenset({AccountKind.USER}),
        payee_kinds=frozenset({AccountKind.MERCHANT}),
        expires=True,
        manual_capture=True,
    ),
)


# Payout channel -> the PSP that pays it out.
PAYOUT_CHANNEL_PSPS: dict[str, str] = {c.name.value: c.psp for c in DEFAULT_CHANNELS if c.psp is not None}


class ChannelRegistry:
    """The channels a process serves, filled once at start-up."""

    def __init__(self) -> None:
        self._channels: dict[ChannelName, Channel] = {}

    def register(self, channel: Channel) -> None:
        assert channel.name not in self._channels, f"channel {channel.name} registered twice"
        self._channels[channel.name] = channel

    def get(self, name: str) -> Channel:
        try:
            return self._channels[ChannelName(name)]
        except (ValueError, KeyError):
            raise UnknownChannelError(
                f"unknown channel {name!r}", {"channel": name, "known": self.names()}
            ) from None

    def names(self) -> list[str]:
        return [name.value for name in self._channels]

    def __iter__(self) -> Iterator[Channel]:
        return iter(self._channels.values())


def default_registry() -> ChannelRegistry:
    registry = ChannelRegistry()
    for channel in DEFAULT_CHANNELS:
        registry.register(channel)
    return registry
