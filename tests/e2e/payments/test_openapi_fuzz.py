"""schemathesis against the running server's /openapi.json with valid signatures: no answer is a 5xx,
and every answer conforms to the schema (status codes listed, bodies and content types as described,
405s with a true Allow header)."""

from __future__ import annotations

import time
import uuid
from urllib.parse import urlsplit

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    allow_header_conformance,
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from paymanager.api.signing import signed_headers
from tests.support.servers import Server

pytestmark = pytest.mark.slow

EXAMPLES_PER_OPERATION = 30
CONFORMANCE = [
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    allow_header_conformance,
]


class HmacAuth(requests.auth.AuthBase):
    """Signs the prepared request's exact bytes, the way a real client must."""

    def __init__(self, service_id: str, secret: str) -> None:
        self.service_id = service_id
        self.secret = secret

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        body = request.body or b""
        if isinstance(body, str):
            body = body.encode()
        parts = urlsplit(request.url or "")
        target = f"{parts.path}?{parts.query}" if parts.query else parts.path
        method = (request.method or "GET").upper()
        request.headers.update(
            signed_headers(self.service_id, self.secret.encode(), method, target, int(time.time()), body)
        )
        if method == "POST":
            request.headers["Idempotency-Key"] = str(uuid.uuid4())
        return request


def test_no_generated_request_gets_a_server_error(server: Server) -> None:
    schema = schemathesis.openapi.from_url(server.url + "/openapi.json")
    auth = HmacAuth(server.admin.id, server.admin.secret)
    session = requests.Session()
    failures: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 10
    for operation in operations:
        if operation.path.endswith("/events"):
            continue  # A stream stays open; its refusals are covered by the auth tests.

        @settings(
            max_examples=EXAMPLES_PER_OPERATION, deadline=None, database=None,
            suppress_health_check=list(HealthCheck),
        )  # fmt: skip
        @given(case=operation.as_strategy(), _=st.just(None))
        def check(case: schemathesis.Case, _: None) -> None:
            response = case.call(base_url=server.url, session=session, auth=auth, timeout=10)
            if response.status_code >= 500:
                failures.append(
                    f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:300]}"
                )
                return
            try:
                case.validate_response(response, checks=CONFORMANCE)
            except FailureGroup as exc:
                failures.append(f"{case.method} {case.formatted_path} -> {response.status_code}: {exc}"[:600])

        check()
    errors = [line for line in server.process.output.splitlines() if "unhandled error" in line]
    assert not failures, "\n".join(failures + errors[-3:])
