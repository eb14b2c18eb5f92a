"""Failures of the payment use cases that are not rules of the domain (keys, names, references)."""

from __future__ import annotations

from paymanager.domain.errors import DomainError, InvalidInputError


class IdempotencyKeyMissingError(InvalidInputError):
    code = "idempotency_key_required"


class IdempotencyKeyReusedError(DomainError):
    code = "idempotency_key_reused"


class IdempotencyOutcomeLostError(DomainError):
    """A key's stored outcome refers to an intent that no longer shows it (archived with its
    partition while the key lived): the response cannot be given again."""

    code = "idempotency_outcome_unavailable"


class AccountReferenceTakenError(InvalidInputError):
    code = "account_reference_taken"


class ServiceNameTakenError(InvalidInputError):
    code = "service_name_taken"
