"""What the checkout-session use cases need from the process, built once by `bootstrap`."""

from __future__ import annotations

from dataclasses import dataclass

from paymanager.application.context import Payments
from paymanager.application.sessions.notify import SessionNotifier
from paymanager.application.sessions.ports import CardAcquirer, GiftCardProvider


@dataclass
class Sessions:
    """The payment component plus the providers and the merchant notifier of checkout sessions.

    The providers are None in a process that makes no provider call (an api-only or cleanup-only
    process builds them all the same when sessions are enabled; a test may leave them out)."""

    payments: Payments
    notifier: SessionNotifier
    gift_cards: GiftCardProvider | None = None
    cards: CardAcquirer | None = None

    async def close(self) -> None:
        for provider in (self.gift_cards, self.cards):
            if provider is not None:
                await provider.close()
