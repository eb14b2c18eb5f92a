"""Optional OpenTelemetry tracing (TRACING_ENABLED, the `tracing` extra).

Spans: the HTTP request (api/http_tracing.py), each job attempt (jobs/_executor.py) and the ledger's
writes (ledger/postgres.py, ledger/tigerbeetle.py). A job enqueued while a span is active carries the
W3C trace context in its payload under `TRACE_KEY`, so the attempt's span joins the request's trace
whichever process runs it. While a span is active every log line carries `trace_id` and `span_id`.

Off by default, and then free: this module imports nothing of opentelemetry, `span` returns one
shared no-op context manager, `carrier` returns None (nothing is added to a payload), and neither the
HTTP middleware nor the log processor is installed. `configure` is the only place opentelemetry is
imported.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Link, Span, Tracer
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

# The payload key of a job's trace context; no producer's own payload field starts with an underscore.
TRACE_KEY = "_trace"

_NO_SPAN: contextlib.nullcontext[None] = contextlib.nullcontext()


class _State:
    tracer: Tracer | None = None
    provider: TracerProvider | None = None
    propagator: TraceContextTextMapPropagator | None = None


_state = _State()


class TracingSettings(Protocol):
    """What `configure` reads (paymanager.config.Settings has it; not imported: config imports logging,
    which imports this module)."""

    @property
    def tracing_enabled(self) -> bool: ...
    @property
    def otel_service_name(self) -> str: ...
    @property
    def otel_exporter_otlp_endpoint(self) -> str | None: ...
    @property
    def tracing_sample_ratio(self) -> float: ...


class TracingUnavailableError(ValueError):
    """TRACING_ENABLED without the `tracing` extra installed."""


def enabled() -> bool:
    return _state.tracer is not None


def configure(settings: TracingSettings, *, exporter: SpanExporter | None = None) -> bool:
    """Start tracing when TRACING_ENABLED (or an `exporter` is given: tests pass the SDK's in-memory
    one, exported synchronously); returns whether tracing is on. Spans go to the OTLP/HTTP endpoint
    of the settings in batches otherwise."""
    if not settings.tracing_enabled and exporter is None:
        return False
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    except ImportError:
        raise TracingUnavailableError(
            "TRACING_ENABLED is set but OpenTelemetry is not installed: pip install 'paymanager[tracing]'"
        ) from None
    provider = TracerProvider(
        resource=Resource.create({"service.name": settings.otel_service_name}),
        sampler=ParentBased(TraceIdRatioBased(settings.tracing_sample_ratio)),
    )
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        endpoint = settings.otel_exporter_otlp_endpoint
        # The exporter appends nothing to an explicit endpoint: give it the traces path.
        traces = f"{endpoint.rstrip('/')}/v1/traces" if endpoint else None
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=traces)))
    shutdown()
    # A provider of our own rather than the global one: tests and a second configure replace it.
    _state.provider = provider
    _state.tracer = provider.get_tracer("paymanager")
    _state.propagator = TraceContextTextMapPropagator()
    _install_log_processor()
    return True


def shutdown() -> None:
    """Export what is buffered and stop tracing (spans after this are no-ops)."""
    provider, _state.provider, _state.tracer = _state.provider, None, None
    if provider is not None:
        provider.shutdown()
        import structlog

        processors = [p for p in structlog.get_config()["processors"] if p is not add_trace_ids]
        structlog.configure(processors=processors)


def span(
    name: str,
    attributes: Mapping[str, str | int | float | bool] | None = None,
    *,
    linked: Sequence[object] = (),
) -> contextlib.AbstractContextManager[Span | None]:
    """A span around a block, child of the active one, linked to the spans of `linked` (contexts
    from `current_span_context`); a shared no-op when tracing is off."""
    tracer = _state.tracer
    if tracer is None:
        return _NO_SPAN
    return tracer.start_as_current_span(name, attributes=attributes, links=_links(linked))


def carrier() -> dict[str, str] | None:
    """The active span's context as W3C headers (`traceparent`), for a job's payload; None when
    tracing is off or no span is active."""
    if _state.tracer is None or _state.propagator is None:
        return None
    headers: dict[str, str] = {}
    _state.propagator.inject(headers)
    return headers or None


@contextlib.contextmanager
def remote_span(
    name: str,
    headers: Mapping[str, str] | None,
    attributes: Mapping[str, str | int | float | bool],
    *,
    server: bool,
) -> Iterator[Span | None]:
    """A span whose parent is the context in `headers` (an HTTP request's, a job payload's): the
    trace goes on across processes. A root span when `headers` carry none."""
    tracer, propagator = _state.tracer, _state.propagator
    if tracer is None or propagator is None:
        yield None
        return
    from opentelemetry.trace import SpanKind

    parent = propagator.extract(dict(headers)) if headers else None
    kind = SpanKind.SERVER if server else SpanKind.CONSUMER
    with tracer.start_as_current_span(name, context=parent, kind=kind, attributes=attributes) as current:
        yield current


def job_span(kind: str, job_id: int, queue: str, attempt: int, payload: Mapping[str, Any]) -> Any:
    """The span of one job attempt, in the trace of whoever enqueued it; the no-op when off."""
    if _state.tracer is None:
        return _NO_SPAN
    headers = payload.get(TRACE_KEY)
    attributes: dict[str, str | int | float | bool] = {
        "job.kind": kind,
        "job.id": job_id,
        "job.queue": queue,
        "job.attempt": attempt,
    }
    return remote_span(
        f"job {kind}", headers if isinstance(headers, dict) else None, attributes, server=False
    )


def with_trace(payload: dict[str, Any]) -> dict[str, Any]:
    """`payload` with the active trace context under `TRACE_KEY` (the same dict when there is none)."""
    headers = carrier()
    if headers is None:
        return payload
    return {**payload, TRACE_KEY: headers}


def without_trace(payload: dict[str, Any]) -> dict[str, Any]:
    """`payload` as its producer wrote it: what a typed job's model validates."""
    if TRACE_KEY not in payload:
        return payload
    return {k: v for k, v in payload.items() if k != TRACE_KEY}


def _links(contexts: Sequence[object]) -> list[Link]:
    from opentelemetry.trace import Link, SpanContext

    return [Link(c) for c in contexts if isinstance(c, SpanContext) and c.is_valid]


def current_span_context() -> object | None:
    """The active span's context (for `span(linked=...)`); None when tracing is off."""
    if _state.tracer is None:
        return None
    from opentelemetry import trace

    return trace.get_current_span().get_span_context()


def add_trace_ids(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: `trace_id` and `span_id` of the active span (hex, as backends show them)."""
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    if context.is_valid:
        event.setdefault("trace_id", format(context.trace_id, "032x"))
        event.setdefault("span_id", format(context.span_id, "016x"))
    return event


def _install_log_processor() -> None:
    """Put `add_trace_ids` first in structlog's chain (configure_logging does the same when it runs
    after `configure`)."""
    import structlog

    processors = list(structlog.get_config()["processors"])
    if add_trace_ids not in processors:
        structlog.configure(processors=[add_trace_ids, *processors])
