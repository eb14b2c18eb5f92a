"""Money: integer amounts in minor units with an ISO 4217 currency. Floats never hold money."""

from __future__ import annotations

from dataclasses import dataclass

from paymanager.domain.errors import CurrencyMismatchError, InvalidAmountError, UnknownCurrencyError

# The largest amount one intent may move, in minor units. It keeps every sum of a day's volume far
# inside PostgreSQL's bigint and the ledger's u128, and it is far above any real payment.
MAX_AMOUNT_MINOR = 10**15


@dataclass(frozen=True, slots=True)
class Currency:
    code: str
    numeric: int  # ISO 4217 numeric code; it doubles as the ledger number of the currency.
    minor_units: int


# The currencies paymanager settles. Adding one is adding a line; the ledger number is its ISO code.
CURRENCIES: dict[str, Currency] = {
    c.code: c
    for c in (
        Currency("THB", 764, 2),
        Currency("USD", 840, 2),
        Currency("EUR", 978, 2),
        Currency("GBP", 826, 2),
        Currency("SGD", 702, 2),
        Currency("JPY", 392, 0),
    )
}


def currency(code: str) -> Currency:
    """The currency of an ISO code, or `UnknownCurrencyError` naming the supported ones."""
    found = CURRENCIES.get(code)
    if found is None:
        raise UnknownCurrencyError(
            f"currency {code!r} is not supported", {"currency": code, "supported": sorted(CURRENCIES)}
        )
    return found


@dataclass(frozen=True, slots=True)
class Money:
    """A non-negative integer amount of minor units of one currency."""

    amount: int
    currency: str

    def __post_init__(self) -> None:
        if isinstance(self.amount, bool) or not isinstance(self.amount, int):
            raise InvalidAmountError("amounts are integers in minor units", {"amount": repr(self.amount)})
        if not 0 <= self.amount <= MAX_AMOUNT_MINOR:
            raise InvalidAmountError(
                f"amount must be between 0 and {MAX_AMOUNT_MINOR} minor units",
                {"amount": self.amount, "max": MAX_AMOUNT_MINOR},
            )
        currency(self.currency)

    def __add__(self, other: Money) -> Money:
        self._same_currency(other)
        return Money(self.amount + other.amount, self.currency)

    def _same_currency(self, other: Money) -> None:
        if other.currency != self.currency:
            raise CurrencyMismatchError(
                f"cannot combine {self.currency} and {other.currency}",
                {"expected": self.currency, "actual": other.currency},
            )


def positive(amount: int, code: str) -> Money:
    """A payment amount: strictly positive money of a supported currency."""
    money = Money(amount, code)
    if money.amount == 0:
        raise InvalidAmountError("amount must be positive", {"amount": 0})
    return money
