"""`/channels`: the channels this process registered at start-up, with their rules and fee rules."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Security

from paymanager.api.auth import authenticate
from paymanager.application.context import Payments
from paymanager.application.services.use_cases import ServiceIdentity
from paymanager.domain.channels import Channel

router = APIRouter(prefix="/channels", tags=["channels"])


def channel_view(channel: Channel) -> dict[str, Any]:
    return {
        "name": channel.name.value,
        "description": channel.description,
        "fee": {
            "fixed_minor": channel.fee.fixed_minor,
            "rate_bps": channel.fee.rate_bps,
            "min_minor": channel.fee.min_minor,
            "max_minor": channel.fee.max_minor,
        },
        "payer_kinds": sorted(kind.value for kind in channel.payer_kinds),
        "payee_kinds": sorted(kind.value for kind in channel.payee_kinds),
        "payer_system_account": channel.payer_system.value if channel.payer_system else None,
        "payee_system_account": channel.payee_system.value if channel.payee_system else None,
        "required_scope": channel.required_scope,
        "settles_on_confirm": channel.settles_on_confirm,
        "expires": channel.expires,
        "psp": channel.psp,
    }


@router.get(
    "",
    summary="Registered channels: which accounts each moves, its fee rule, its scope",
    description="fee = clamp(fixed_minor + ceil(amount x rate_bps / 10,000), min_minor, max_minor). "
    "`settles_on_confirm: false` (the payouts: ipps-, qp- and wise-transfer) means a confirmed intent "
    "waits for the PSP named by `psp`; a payout whose PSP is not in PSP_NAMES is refused (422 "
    "`psp_not_configured`).",
)
async def list_channels(request: Request, _: ServiceIdentity = Security(authenticate)) -> dict[str, Any]:
    payments: Payments = request.app.state.payments
    return {"object": "list", "data": [channel_view(channel) for channel in payments.channels]}
