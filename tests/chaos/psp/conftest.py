from tests.integration.psp.conftest import payouts, start_payout_api  # noqa: F401
from tests.support.psp_sandboxes import psp_sandbox, psp_sandbox_server  # noqa: F401
