"""Holds that the ledger itself expires, on either backend, in real time: a confirm's hold made with a
ledger timeout of one second, and a wait until the ledger has released it.

Only time is shortened: the hold's timeout (settlement deadline + margin) comes down to 1 s by making
the margin negative, so TigerBeetle expires the hold on its own clock, as in production, and the
PostgreSQL ledger when its periodic expiry job runs.
"""

from __future__ import annotations

import uuid

import pytest

from paymanager.application.context import Payments
from paymanager.application.intents import confirm
from tests.support.waiting import wait_until

HOLD_TIMEOUT_SEC = 1
# TigerBeetle expires on its pulse once the timeout passed; a busy machine delays that pulse.
RELEASE_TIMEOUT_S = 60.0


def expire_holds_in_one_second(payments: Payments, monkeypatch: pytest.MonkeyPatch) -> None:
    """Confirms of settle-on-confirm channels from now on hold with a ledger timeout of 1 s."""
    deadline_sec = payments.settings.intent_settle_deadline_sec
    monkeypatch.setattr(confirm, "HOLD_TIMEOUT_MARGIN_SEC", HOLD_TIMEOUT_SEC - deadline_sec)


async def wait_until_released(payments: Payments, account_id: uuid.UUID) -> None:
    """Until the ledger holds nothing pending on the account: on TigerBeetle once its clock passed
    the timeout; on PostgreSQL once the expiry job (run here as its periodic job would) found it."""

    async def released() -> bool:
        await payments.ledger.expire_pending()
        return (await payments.ledger.balance(account_id.int)).pending == 0

    await wait_until(released, timeout_s=RELEASE_TIMEOUT_S)
