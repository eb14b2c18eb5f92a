"""The ops tests build the payment component as the payments tests do, the PSP step against the
sandbox PSP as the PSP tests do."""

from tests.integration.payments.conftest import api, payments  # noqa: F401
from tests.integration.psp.conftest import start_payout_api  # noqa: F401
from tests.support.psp_sandboxes import psp_sandbox, psp_sandbox_server  # noqa: F401
