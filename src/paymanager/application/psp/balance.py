"""The balance monitor (psp-worker, BALANCE_MONITOR_ENABLED): the ledger balance of
`system.nostro.<psp>.<CCY>` against the PSP's `partner_balance()`, once per BALANCE_TICK_MS per PSP
over the whole cluster, whatever the number of processes running it.

Each process polls; the one whose UPDATE moves the PSP's `psp_balance_tick` forward runs the check.
States: `balance_check_failed` (the PSP did not answer: never a false ok), `low_partner_balance`
(below IPPS_LOW_BALANCE_THRESHOLD_SATANG), `balance_drift` (ledger and partner differ by more than
IPPS_DRIFT_THRESHOLD_SATANG), `balance_ok`. The latest check is stored (`GET /admin/balances`); an
alert (a row, a log line, an event on `psp.balance`) is raised when the state changes, not each tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from paymanager.adapters.psp.port import PspDriver, PspError
from paymanager.application import ledger_ops
from paymanager.application.context import Payments
from paymanager.application.psp.store import PspStore
from paymanager.logging import get_logger
from paymanager.metrics import psp as psp_metrics

log = get_logger("paymanager.balance")

OK = "balance_ok"
LOW = "low_partner_balance"
DRIFT = "balance_drift"
FAILED = "balance_check_failed"
EVENT_TOPIC = "psp.balance"
POLL_MS_MIN = 100
POLL_MS_MAX = 5_000


@dataclass(frozen=True, slots=True)
class Thresholds:
    low_partner_balance: int
    drift: int


def classify(ledger: int, partner: int, thresholds: Thresholds) -> str:
    if partner < thresholds.low_partner_balance:
        return LOW
    if abs(ledger - partner) > thresholds.drift:
        return DRIFT
    return OK


def nostro_accounts(payments: Payments, psp: str) -> dict[str, uuid.UUID]:
    """`{currency: account id}` of the PSP's nostro accounts."""
    prefix = f"system.nostro.{psp}."
    return {name.removeprefix(prefix): ident for name, ident in payments.system_accounts.items()
            if name.startswith(prefix)}  # fmt: skip


class BalanceMonitor:
    """A service of the psp-worker role when BALANCE_MONITOR_ENABLED."""

    name = "balance-monitor"

    def __init__(self, payments: Payments, drivers: Mapping[str, PspDriver]) -> None:
        settings = payments.settings
        self.payments = payments
        self.drivers = drivers
        self.tick_ms = settings.balance_tick_ms
        self.poll_s = max(POLL_MS_MIN, min(self.tick_ms // 5, POLL_MS_MAX)) / 1000
        self.thresholds = Thresholds(
            settings.ipps_low_balance_threshold_satang, settings.ipps_drift_threshold_satang
        )
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name=self.name)

    async def stop(self, timeout_s: float) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _loop(self) -> None:
        while True:
            for psp in self.drivers:
                try:
                    await self.tick(psp)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # the monitor must outlive a database blip
                    log.warning("balance check did not run", psp=psp, error=repr(exc))
            await asyncio.sleep(self.poll_s)

    async def tick(self, psp: str) -> bool:
        """Run the PSP's check if its tick is due and this process claims it; True when it ran."""
        async with self.payments.pool.acquire() as conn:
            if not await PspStore(conn).claim_balance_tick(psp=psp, tick_ms=self.tick_ms):
                return False
        for currency, account_id in nostro_accounts(self.payments, psp).items():
            await self.check(psp, currency, account_id)
        return True

    async def check(self, psp: str, currency: str, account_id: uuid.UUID) -> str:
        ledger_balance = (await ledger_ops.balance(self.payments.ledger, account_id))["posted"]
        partner: int | None = None
        error: str | None = None
        try:
            partner = await psp_metrics.timed(
                psp, "partner_balance", self.drivers[psp].partner_balance(currency)
            )
        except PspError as exc:
            error = str(exc)
        state = FAILED if partner is None else classify(ledger_balance, partner, self.thresholds)
        async with self.payments.pool.acquire() as conn, conn.transaction():
            store = PspStore(conn)
            previous = await store.record_balance(
                psp=psp, currency=currency, state=state, ledger_balance=ledger_balance,
                partner_balance=partner, error=error,
            )  # fmt: skip
            changed = previous != state
            if changed:
                await store.insert_alert(
                    psp=psp, currency=currency, state=state, previous_state=previous,
                    ledger_balance=ledger_balance, partner_balance=partner, error=error,
                )  # fmt: skip
        if changed:
            fields = {
                "psp": psp, "currency": currency, "state": state, "previous_state": previous,
                "ledger_balance": ledger_balance, "partner_balance": partner, "error": error,
            }  # fmt: skip
            if state == OK:
                log.info("balance alert", **fields)
            else:
                log.error("balance alert", **fields)
            try:
                await self.payments.publisher.publish(EVENT_TOPIC, {"type": "balance_alert", **fields})
            except Exception as exc:  # best effort: the row and the log are the record
                log.warning("balance alert not published", error=repr(exc))
        return state
