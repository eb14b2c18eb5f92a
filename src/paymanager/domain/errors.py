"""Typed failures of the payment domain: what a client did that the rules refuse.

Each carries a stable `code` and `details`; the API maps each class to one HTTP status in one place
(`paymanager.api.errors`), so the domain says what went wrong and never how to render it.
"""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    """A rule refused a request; `code` is stable, `details` say which rule and with what values."""

    code = "domain_error"

    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}


class InvalidAmountError(DomainError):
    code = "invalid_amount"


class UnknownCurrencyError(DomainError):
    code = "unknown_currency"


class CurrencyMismatchError(DomainError):
    code = "currency_mismatch"


class UnknownChannelError(DomainError):
    code = "unknown_channel"


class AccountKindNotAllowedError(DomainError):
    code = "account_kind_not_allowed"


class SameAccountError(DomainError):
    code = "same_account"


class ScopeRequiredError(DomainError):
    code = "scope_required"


class InvalidTransitionError(DomainError):
    code = "invalid_transition"


class IntentExpiredError(DomainError):
    code = "intent_expired"


class PolicyViolationError(DomainError):
    code = "policy_violation"


class InsufficientFundsError(DomainError):
    code = "insufficient_funds"


class NotFoundError(DomainError):
    code = "not_found"


class InvalidInputError(DomainError):
    code = "invalid_input"


class RefundExceedsRefundableError(DomainError):
    """A refund larger than what is left to refund; `details.refundable` says what is."""

    code = "refund_exceeds_refundable"


class IntentNotSettledError(DomainError):
    code = "intent_not_settled"


class RefundNotRefundableError(DomainError):
    code = "refund_not_refundable"


class RefundNotSupportedError(DomainError):
    code = "refund_not_supported"


class CaptureMethodNotAllowedError(DomainError):
    """`capture_method=manual` on a channel whose intents the merchant does not capture."""

    code = "capture_method_not_allowed"


class CaptureExceedsHoldError(DomainError):
    """A capture larger than the hold; `details.capturable` says what may be captured."""

    code = "capture_exceeds_capturable"


class IntentNotCapturableError(DomainError):
    """A capture of an intent that does not wait for one (automatic, not confirmed, ended)."""

    code = "intent_not_capturable"


class AlreadyCapturedError(IntentNotCapturableError):
    code = "already_captured"


class CaptureExpiredError(DomainError):
    """A capture after the capture deadline: the hold is (now) voided and the intent expired."""

    code = "capture_expired"


class PspNotServedError(DomainError):
    """A payout channel whose PSP is not in PSP_NAMES: no psp-worker would ever take its payouts."""

    code = "psp_not_configured"
