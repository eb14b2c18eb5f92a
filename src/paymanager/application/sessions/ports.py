"""What checkout sessions need from the outside: a gift-card provider and a card acquirer.

The drivers (`adapters/giftcard`, `adapters/card`) implement these over HTTP. Every call carries an
idempotency key derived from the leg (`leg_key`), so a retried action submits the same key and the
provider answers with the first outcome instead of moving money again.

Expected refusals are results (`Declined`); a provider that cannot be reached, times out or answers
5xx raises `ProviderUnavailableError`, and the action is retried on the outbox schedule with the same
key (its outcome may be unknown: it may have been accepted before the timeout).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Protocol


class ProviderUnavailableError(Exception):
    """The provider could not be reached or did not answer in time; the outcome is unknown."""


@dataclass(frozen=True, slots=True)
class Approved:
    """The provider did it; `reference` is its id for the operation."""

    reference: str


@dataclass(frozen=True, slots=True)
class Declined:
    """The provider refused; nothing moved. `code` is the provider's reason."""

    code: str
    message: str = ""


Outcome = Approved | Declined


@dataclass(frozen=True, slots=True)
class GiftCardBalance:
    card: str
    balance: int
    currency: str


class GiftCardProvider(Protocol):
    """A gift-card provider (the Titreo dialect): balance, debit, cancel of a debit."""

    async def balance(self, card: str) -> GiftCardBalance | Declined: ...

    async def debit(self, *, card: str, amount: int, currency: str, idempotency_key: str) -> Outcome: ...

    async def cancel(self, *, card: str, idempotency_key: str) -> Outcome:
        """Cancel the debit made with `idempotency_key`; a debit never made is cancelled in advance,
        so one still in flight is refused when it arrives. Idempotent."""
        ...

    async def close(self) -> None: ...


class CardAcquirer(Protocol):
    """Card acquiring: authorise (hold), capture the hold, release it.

    An authorisation is named by its idempotency key, which capture and release use as well: a
    release of an authorisation whose outcome is unknown releases it if it was made, or refuses it
    when it arrives later."""

    async def authorize(self, *, token: str, amount: int, currency: str, idempotency_key: str) -> Outcome: ...

    async def capture(self, *, authorization_key: str, amount: int) -> Outcome: ...

    async def release(self, *, authorization_key: str) -> Outcome: ...

    async def close(self) -> None: ...


def leg_key(leg_id: uuid.UUID, operation: str) -> str:
    """The idempotency key of `operation` on a leg: the same for every retry of that action."""
    return f"{leg_id}.{operation}"
