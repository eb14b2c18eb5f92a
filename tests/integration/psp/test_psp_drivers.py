"""Each driver against its sandbox dialect over real HTTP: beneficiary check, transfer, inquiry,
partner balance, the faults mapped to the port's errors, and credentials kept out of reprs."""

from __future__ import annotations

import uuid

import pytest

from paymanager.adapters.psp._http import PspCredentials
from paymanager.adapters.psp.drivers import build_driver
from paymanager.adapters.psp.port import PayoutOrder, PspRateLimitedError, PspUnavailableError
from paymanager.domain.psp import PspOutcome
from tests.support.psp_sandboxes import Sandbox

DIALECTS = ["ipps", "qp", "wise"]


def _order(query_ref: str | None = None) -> PayoutOrder:
    return PayoutOrder(uuid.uuid4(), uuid.uuid4(), 12_345, "THB", "9876543210", query_ref)


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_payout_in_each_dialect(psp_sandbox: Sandbox, dialect: str) -> None:
    driver = build_driver(dialect, PspCredentials.from_json(psp_sandbox.config(dialect, timeout_ms=2_000)))
    try:
        order = _order()
        assert (await driver.inquire(order)).outcome is PspOutcome.NOT_FOUND
        queried = await driver.query(order)
        assert queried.accepted
        order = PayoutOrder(
            order.reference, order.idempotency_key, 12_345, "THB", "9876543210", queried.query_ref
        )
        sent = await driver.transfer(order)
        assert sent.outcome is PspOutcome.COMPLETED
        assert (await driver.inquire(order)).outcome is PspOutcome.COMPLETED
        if driver.resends_safely:  # the PSP deduplicates: the same order again is the same transfer
            again = await driver.transfer(order)
            assert again.reference == sent.reference
            assert len(psp_sandbox.state.transfers) == 1
        psp_sandbox.faults(partner_balance={"THB": 777_700})
        assert await driver.partner_balance("THB") == 777_700
        assert "sandbox-key" not in repr(driver)
        assert "9876543210" not in repr(order)
    finally:
        await driver.aclose()


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_faults_become_the_ports_errors(psp_sandbox: Sandbox, dialect: str) -> None:
    driver = build_driver(dialect, PspCredentials.from_json(psp_sandbox.config(dialect, timeout_ms=1_500)))
    try:
        psp_sandbox.faults(account_invalid_rate=1)
        assert not (await driver.query(_order())).accepted
        psp_sandbox.faults(account_invalid_rate=0, rate_limited_requests=1, retry_after_s=3)
        with pytest.raises(PspRateLimitedError) as limited:
            await driver.query(_order())
        assert limited.value.retry_after_ms == 3_000
        psp_sandbox.faults(error_rate=1)
        with pytest.raises(PspUnavailableError) as failed:
            await driver.transfer(_order("q"))
        assert failed.value.ambiguous  # a 5xx on a transfer: inquire before anything else
        psp_sandbox.faults(error_rate=0, accept_then_timeout_rate=1, hang_ms=4_000)
        order = _order("q")
        with pytest.raises(PspUnavailableError, match="no answer") as timed_out:
            await driver.transfer(order)
        assert timed_out.value.ambiguous
        assert (
            psp_sandbox.submissions()[str(order.idempotency_key if dialect == "wise" else order.reference)]
            == 1
        )
        psp_sandbox.faults(accept_then_timeout_rate=0, failure_rate=1)
        assert (await driver.transfer(_order("q"))).outcome is PspOutcome.FAILED
        psp_sandbox.faults(failure_rate=0, manual_review_rate=1)
        assert (await driver.transfer(_order("q"))).outcome is PspOutcome.UNKNOWN
    finally:
        await driver.aclose()


async def test_an_unreachable_psp_is_unavailable_not_ambiguous() -> None:
    driver = build_driver(
        "ipps", PspCredentials.from_json(b'{"base_url": "http://127.0.0.1:9", "api_key": "k"}')
    )
    try:
        with pytest.raises(PspUnavailableError) as refused:
            await driver.transfer(_order("q"))
        assert not refused.value.ambiguous
    finally:
        await driver.aclose()
