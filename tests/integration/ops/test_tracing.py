"""Tracing (TRACING_ENABLED): one signed create + confirm is one trace, from the HTTP request through
the settlement job it enqueued to the ledger's write, and the log lines written inside it carry its
trace id. Spans are read from OpenTelemetry's in-memory exporter (the SDK's own test exporter)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import AsyncIterator, Iterator

import asyncpg
import httpx
import pytest
import structlog
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from paymanager import tracing
from paymanager.api.app import create_app
from paymanager.application.intents.confirm import SETTLE_KIND
from paymanager.application.services.use_cases import create_service
from paymanager.config import Settings
from paymanager.logging import configure_logging
from tests.integration.payments.conftest import build_components
from tests.support.signed_client import SignedClient
from tests.support.waiting import wait_until


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tracing.configure(Settings(tracing_enabled=True), exporter=exporter)
    try:
        yield exporter
    finally:
        tracing.shutdown()


@pytest.fixture
def log_lines(spans: InMemorySpanExporter) -> Iterator[io.StringIO]:
    """The process's real log configuration (JSON lines) into a buffer, restored afterwards."""
    saved, root_handlers = structlog.get_config(), logging.getLogger().handlers[:]
    buffer = io.StringIO()
    configure_logging("info", "json")
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=buffer))
    try:
        yield buffer
    finally:
        structlog.configure(**saved)
        logging.getLogger().handlers[:] = root_handlers


@pytest.fixture
async def shop(
    spans: InMemorySpanExporter, log_lines: io.StringIO, pool: asyncpg.Pool, database_url: str
) -> AsyncIterator[SignedClient]:
    """An api and an outbox worker in this process, built with tracing on (as `paymanager run`
    configures it before the components)."""
    components = await build_components(pool, database_url, worker_roles="api,outbox-worker")
    for service in components.services:
        await service.start()
    async with pool.acquire() as conn:
        admin, secret = await create_service(conn, components.payments.box, "admin", admin=True)
    app = create_app(components)
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as http:
            yield SignedClient(http, admin.id, secret)
    finally:
        for service in reversed(components.services):
            await service.stop(5)
        await components.close()


def _named(spans: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


async def test_a_confirm_and_its_settlement_job_and_ledger_write_are_one_trace(
    shop: SignedClient, spans: InMemorySpanExporter, log_lines: io.StringIO, pool: asyncpg.Pool
) -> None:
    account = await shop.open_account()
    created = await shop.post(
        "/intents",
        {"channel": "admin-transfer", "amount": 500, "currency": "THB", "payee_account_id": account},
    )
    assert created.status_code == 201, created.text
    intent_id = created.json()["id"]
    confirmed = await shop.post(f"/intents/{intent_id}/confirm")
    assert confirmed.status_code == 200, confirmed.text

    async def settled() -> bool:
        status = await pool.fetchval("SELECT status FROM intent WHERE id = $1::uuid", intent_id)
        return status == "settled" and bool(_named(spans.get_finished_spans(), f"job {SETTLE_KIND}"))

    await wait_until(settled)

    finished = list(spans.get_finished_spans())
    (request,) = _named(finished, "POST /intents/{intent_id}/confirm")
    assert request.kind is SpanKind.SERVER
    assert request.attributes is not None
    assert request.attributes["http.response.status_code"] == 200
    trace_id = request.context.trace_id
    (job,) = _named(finished, f"job {SETTLE_KIND}")
    assert job.kind is SpanKind.CONSUMER
    assert job.context.trace_id == trace_id, "the job's span continues the request's trace"
    assert job.parent is not None
    # The payload carried the request's context: the job is a child of a span of the request.
    in_request = {s.context.span_id for s in finished if s.context.trace_id == trace_id and s is not job}
    assert job.parent.span_id in in_request
    # The ledger writes are in the same trace: the hold under the request, the post under the job.
    by_id = {s.context.span_id: s for s in finished}
    writes = [s for s in _named(finished, "ledger.create_transfers") if s.context.trace_id == trace_id]
    assert any(request.context.span_id in _ancestors(s, by_id) for s in writes), [s.name for s in finished]
    assert any(job.context.span_id in _ancestors(s, by_id) for s in writes), [s.name for s in finished]

    lines = [json.loads(line) for line in log_lines.getvalue().splitlines() if line.startswith("{")]
    (access,) = [
        line
        for line in lines
        if line.get("event") == "request" and line.get("route") == "/intents/{intent_id}/confirm"
    ]
    assert access["trace_id"] == format(trace_id, "032x")
    assert access["span_id"] == format(request.context.span_id, "016x")


def _ancestors(span: ReadableSpan, by_id: dict[int, ReadableSpan]) -> set[int]:
    found: set[int] = set()
    parent = span.parent
    while parent is not None:
        found.add(parent.span_id)
        nxt = by_id.get(parent.span_id)
        parent = nxt.parent if nxt is not None else None
    return found


async def test_a_log_line_outside_any_span_has_no_trace_id(
    spans: InMemorySpanExporter, log_lines: io.StringIO
) -> None:
    structlog.get_logger("t").info("outside")
    with tracing.span("inside"):
        structlog.get_logger("t").info("inside")
    outside, inside = (json.loads(line) for line in log_lines.getvalue().splitlines())
    assert "trace_id" not in outside
    (span,) = spans.get_finished_spans()
    assert inside["trace_id"] == format(span.context.trace_id, "032x")


async def test_a_caller_traceparent_is_the_request_span_parent(
    shop: SignedClient, spans: InMemorySpanExporter
) -> None:
    caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    response = await shop.http.get(
        "/livez", headers={"traceparent": f"00-{caller_trace}-00f067aa0ba902b7-01"}
    )
    assert response.status_code == 200
    (span,) = _named(list(spans.get_finished_spans()), "GET /livez")
    assert format(span.context.trace_id, "032x") == caller_trace
    assert span.parent is not None
    assert format(span.parent.span_id, "016x") == "00f067aa0ba902b7"
