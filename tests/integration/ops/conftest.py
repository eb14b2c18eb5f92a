"""The ops tests build the payment component as the payments tests do."""

from tests.integration.payments.conftest import api, payments  # noqa: F401
