"""Per-service rate limits: beyond its requests per second a service gets 429 `rate_limited` with
Retry-After, other services are unaffected, and the budget comes back with time."""

from __future__ import annotations

from paymanager.api.rate_limit import ServiceRateLimiter
from paymanager.application.services.use_cases import set_rate_limit
from tests.integration.payments.conftest import Api


class StoppedClock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def _limiter(api: Api) -> ServiceRateLimiter:
    limiter: ServiceRateLimiter = api.app.state.rate_limiter
    return limiter


async def test_a_service_over_its_own_limit_gets_429_with_retry_after(api: Api) -> None:
    clock = StoppedClock()
    _limiter(api).clock = clock
    async with api.payments.pool.acquire() as conn:
        assert await set_rate_limit(conn, api.client.service_id, 2)

    assert (await api.client.get("/intents")).status_code == 200
    assert (await api.client.get("/intents")).status_code == 200
    refused = await api.client.get("/intents")

    assert refused.status_code == 429, refused.text
    assert refused.json()["error"]["code"] == "rate_limited"
    assert refused.headers["Retry-After"] == "1"
    # Another service has its own budget.
    assert (await api.admin.get("/intents")).status_code == 200
    clock.now += 0.5  # one token back at 2 per second
    assert (await api.client.get("/intents")).status_code == 200
    assert (await api.client.get("/intents")).status_code == 429


async def test_the_process_default_applies_to_services_without_their_own(api: Api) -> None:
    clock = StoppedClock()
    _limiter(api).clock = clock
    _limiter(api).default_per_sec = 1
    assert (await api.client.get("/intents")).status_code == 200
    assert (await api.client.get("/intents")).status_code == 429
    _limiter(api).default_per_sec = 0  # 0: no limit
    assert (await api.client.get("/intents")).status_code == 200


async def test_a_rate_limited_request_changes_nothing(api: Api) -> None:
    clock = StoppedClock()
    _limiter(api).clock = clock
    _limiter(api).default_per_sec = 1
    assert (await api.client.get("/intents")).status_code == 200
    refused = await api.client.post("/accounts", {"kind": "user", "currency": "THB"}, key="acct-1")
    assert refused.status_code == 429
    clock.now += 1
    # The key was not spent by the refusal: the same request now creates the account.
    created = await api.client.post("/accounts", {"kind": "user", "currency": "THB"}, key="acct-1")
    assert created.status_code == 201, created.text
    assert created.headers.get("Idempotent-Replayed") is None
