"""The one port every PSP driver implements, and the values that cross it.

A driver speaks one PSP's dialect over HTTP; the payout job (application/psp/payout.py) speaks only
these words. Every value that could carry a credential or an account number masks it in its repr.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from paymanager.domain.psp import PspOutcome, mask


@dataclass(frozen=True, slots=True)
class PayoutOrder:
    """One payout as the PSP sees it: `reference` is our transaction id, the PSP's key for inquiries."""

    reference: uuid.UUID
    idempotency_key: uuid.UUID
    amount: int
    currency: str
    beneficiary: str = field(repr=False)
    query_ref: str | None = None

    def __repr__(self) -> str:
        return (
            f"PayoutOrder(reference={self.reference}, amount={self.amount}, currency={self.currency}, "
            f"beneficiary={mask(self.beneficiary)}, query_ref={self.query_ref})"
        )


@dataclass(frozen=True, slots=True)
class QueryResult:
    """The beneficiary check before a transfer: accepted with the PSP's reference, or refused."""

    accepted: bool
    query_ref: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class TransferResult:
    outcome: PspOutcome
    reference: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class WebhookEvent:
    """A verified PSP webhook: its event id (the deduplication key) and what it says of which payout."""

    event_id: str
    reference: str
    outcome: PspOutcome
    amount: int
    psp_reference: str | None = None


class PspError(Exception):
    """A PSP call that did not give an answer to act on."""


class PspUnavailableError(PspError):
    """No usable answer (a timeout, a refused connection, a 5xx). `ambiguous` when the request may have
    been received and acted on (a timeout after sending): the caller inquires before anything else."""

    def __init__(self, message: str, *, ambiguous: bool) -> None:
        self.ambiguous = ambiguous
        super().__init__(message)


class PspRateLimitedError(PspError):
    """The PSP answered 429: wait `retry_after_ms`, do not fail."""

    def __init__(self, retry_after_ms: int) -> None:
        self.retry_after_ms = retry_after_ms
        super().__init__(f"the PSP asks to wait {retry_after_ms} ms")


class InvalidWebhookError(PspError):
    """A webhook whose signature or body does not verify: answered 400, never stored."""


class PspDriver(Protocol):
    """One PSP. `resends_safely`: a transfer sent again with the same order is deduplicated by the PSP
    (Wise, QP); False (IPPS) means a transfer is sent at most once and inquired after."""

    name: str
    resends_safely: bool

    async def query(self, order: PayoutOrder) -> QueryResult: ...

    async def transfer(self, order: PayoutOrder) -> TransferResult: ...

    async def inquire(self, order: PayoutOrder) -> TransferResult: ...

    async def partner_balance(self, currency: str) -> int: ...

    def verify_webhook(self, headers: Mapping[str, str], body: bytes) -> WebhookEvent: ...

    async def aclose(self) -> None: ...
