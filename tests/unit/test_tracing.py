"""Tracing off (the default) costs nothing of ours: no module of paymanager imports OpenTelemetry in a
process that loads the API, the job engine and the ledger and runs the tracing hooks; tracing asked
for without the extra is a clear error.

(FastAPI and redis-py import OpenTelemetry themselves whenever it is installed, for their own
optional instrumentation: the test records who imports it and allows only them.)"""

from __future__ import annotations

import subprocess
import sys

OFF = """
import builtins
import sys

importers = set()
real_import = builtins.__import__


def recording_import(name, globals=None, locals=None, fromlist=(), level=0):
    # Every import statement, whether the module is loaded already or not.
    module = (globals or {}).get("__name__", "")
    if level == 0 and name.split(".")[0] == "opentelemetry" and module.split(".")[0] == "paymanager":
        importers.add(module)
    return real_import(name, globals, locals, fromlist, level)


builtins.__import__ = recording_import
from paymanager import tracing
from paymanager.config import Settings
from paymanager.logging import configure_logging
import paymanager.api.app, paymanager.runtime, paymanager.bootstrap, paymanager.cli
import paymanager.jobs._executor, paymanager.jobs.batch, paymanager.jobs.enqueue
import paymanager.ledger.postgres, paymanager.ledger.tigerbeetle

assert tracing.configure(Settings()) is False
configure_logging("info", "json")
with tracing.span("nothing") as span:
    assert span is None
assert tracing.carrier() is None
payload = {"intent_id": "x"}
assert tracing.with_trace(payload) is payload
with tracing.job_span("k", 1, "q", 1, payload):
    pass
print(",".join(sorted(importers)))
"""


def run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False, env=env or None
    )


def test_with_tracing_off_no_opentelemetry_module_is_loaded() -> None:
    result = run(OFF)
    assert result.returncode == 0, result.stderr[-800:]
    assert result.stdout.strip() == "", f"imported OpenTelemetry with tracing off: {result.stdout}"


def test_tracing_on_loads_it_and_makes_real_spans() -> None:
    code = OFF.replace("assert tracing.configure(Settings()) is False", "").replace(
        "    assert span is None", "    assert span is not None"
    )
    code = "from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter\n" + code
    code = code.replace(
        "configure_logging(",
        "tracing.configure(Settings(), exporter=InMemorySpanExporter()); configure_logging(",
    )
    result = run(code)
    assert result.returncode == 0, result.stderr[-800:]
    assert "paymanager.tracing" in result.stdout.strip().split(","), "the hook sees our imports"


def test_tracing_enabled_without_the_extra_is_a_clear_error() -> None:
    # As in an installation without the `tracing` extra: importing opentelemetry fails.
    code = """
import sys
for name in ("opentelemetry", "opentelemetry.sdk", "opentelemetry.sdk.resources"):
    sys.modules[name] = None
from paymanager import tracing
from paymanager.config import Settings
try:
    tracing.configure(Settings(tracing_enabled=True))
except tracing.TracingUnavailableError as exc:
    print(exc)
"""
    result = run(code)
    assert result.returncode == 0, result.stderr[-800:]
    assert "pip install 'paymanager[tracing]'" in result.stdout
