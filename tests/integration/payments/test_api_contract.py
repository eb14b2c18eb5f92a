"""What the API promises a client beyond each route's happy path: strict JSON numbers, the error
responses and currencies the OpenAPI lists, and a 405 that names every allowed method."""

from __future__ import annotations

import pytest

from paymanager.domain.money import CURRENCIES
from tests.integration.payments.conftest import Api


async def _post_raw(api: Api, path: str, body: bytes, key: str) -> tuple[int, dict[str, object]]:
    headers = api.client.headers_for("POST", path, body)
    headers |= {"Idempotency-Key": key, "Content-Type": "application/json"}
    response = await api.http.post(path, content=body, headers=headers)
    return response.status_code, response.json()


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e400", "-1e400"])
async def test_non_finite_numbers_in_metadata_are_refused_naming_the_field(api: Api, number: str) -> None:
    payer = await api.client.open_account()
    payee = await api.client.open_account()
    body = (
        '{"channel": "internal-p2p", "amount": 100, "currency": "THB", '
        f'"payer_account_id": "{payer}", "payee_account_id": "{payee}", '
        f'"metadata": {{"order": {{"lines": [1, {number}]}}}}}}'
    ).encode()
    status, payload = await _post_raw(api, "/intents", body, key=f"nan-{number}")
    assert status == 422, payload
    error = payload["error"]
    assert isinstance(error, dict)
    assert error["code"] == "validation_error"
    assert "metadata.order.lines[1]" in str(error["details"])
    listed = await api.client.get(f"/accounts/{payer}/history")
    assert listed.json()["data"] == []


async def test_a_non_finite_amount_is_refused(api: Api) -> None:
    body = b'{"channel": "internal-p2p", "amount": NaN, "currency": "THB"}'
    status, payload = await _post_raw(api, "/intents/quote", body, key="nan-amount")
    assert status == 422, payload


async def test_openapi_lists_the_error_responses_of_signed_routes(api: Api) -> None:
    spec = (await api.http.get("/openapi.json")).json()
    confirm = spec["paths"]["/intents/{intent_id}/confirm"]["post"]["responses"]
    for status in ("401", "404", "409", "422", "429", "503"):
        assert status in confirm, status
        schema = confirm[status]["content"]["application/json"]["schema"]
        assert schema["$ref"].endswith("/ErrorOut")


async def test_openapi_lists_only_the_supported_currencies(api: Api) -> None:
    spec = (await api.http.get("/openapi.json")).json()
    currency = spec["components"]["schemas"]["QuoteRequest"]["properties"]["currency"]
    assert currency["enum"] == sorted(CURRENCIES)


async def test_an_unsupported_currency_is_a_422_naming_the_supported_ones(api: Api) -> None:
    response = await api.client.post(
        "/intents/quote", {"channel": "internal-p2p", "amount": 100, "currency": "XYZ"}
    )
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "unknown_currency"
    assert response.json()["error"]["details"]["supported"] == sorted(CURRENCIES)


async def test_a_wrong_method_answers_405_allowing_every_method_of_the_path(api: Api) -> None:
    response = await api.http.delete("/intents")
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"
    assert set(response.headers["Allow"].split(", ")) == {"GET", "POST"}
