"""Structured logs: JSON lines in production, readable colour on a terminal.

Every line carries the process id (`hostname.pid`) and its roles, bound once at start-up.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog


def configure_logging(level: str = "info", fmt: str = "auto", **context: Any) -> None:
    """Configure structlog and the standard library's root logger once per process."""
    use_console = fmt == "console" or (fmt == "auto" and sys.stderr.isatty())
    from paymanager import tracing

    shared: list[Any] = [
        # The active span's trace_id and span_id (TRACING_ENABLED); absent otherwise, at no cost.
        *([tracing.add_trace_ids] if tracing.enabled() else []),
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: Any = (
        structlog.dev.ConsoleRenderer()
        if use_console
        else structlog.processors.JSONRenderer(serializer=_orjson_dumps)
    )
    numeric = logging.getLevelNamesMapping()[level.upper()]
    structlog.configure(
        processors=[
            *shared,
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    structlog.contextvars.clear_contextvars()
    if context:
        structlog.contextvars.bind_contextvars(**context)
    # Libraries (uvicorn, asyncpg) log through the standard library: render their records with the same
    # processors, so they are JSON lines with the process id and roles too.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(max(numeric, logging.INFO))


def _orjson_dumps(value: Any, **_: Any) -> str:
    import orjson

    return orjson.dumps(value, default=str).decode()


def get_logger(name: str | None = None) -> Any:
    return structlog.get_logger(name)
