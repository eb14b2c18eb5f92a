from __future__ import annotations

import pytest

from paymanager.jobs import MaintenanceOptions, PeriodicJob, Registry, Retention, WorkerOptions


def test_worker_options_bounds_are_checked() -> None:
    with pytest.raises(ValueError, match="at most half"):
        WorkerOptions(lease_ms=1_000, heartbeat_interval_ms=600)
    with pytest.raises(ValueError, match="claim_batch_max"):
        WorkerOptions(claim_batch_max=0)
    with pytest.raises(ValueError, match="claim_cooldown_ms"):
        WorkerOptions(claim_cooldown_ms=-1)


def test_maintenance_options_refuse_duplicate_periodic_names() -> None:
    job = PeriodicJob("sweep", "k", interval_ms=1_000)
    with pytest.raises(ValueError, match="unique"):
        MaintenanceOptions(periodic=(job, job))


def test_retention_per_queue_falls_back_to_default() -> None:
    special = Retention(completed_count=1)
    options = MaintenanceOptions(retention_by_queue={"psp": special})
    assert options.retention_for("psp") is special
    assert options.retention_for("other") == Retention()


def test_registry_refuses_a_kind_twice_and_bad_names() -> None:
    registry = Registry()
    registry.register("a", lambda ctx: None)
    with pytest.raises(ValueError, match="already"):
        registry.register("a", lambda ctx: None)
    with pytest.raises(ValueError):
        registry.register("bad kind", lambda ctx: None)


def test_jobs_library_imports_nothing_payment_specific() -> None:
    import ast
    from pathlib import Path

    import paymanager.jobs

    allowed = {"paymanager.jobs", "paymanager.db.database", "paymanager.db.listener", "paymanager.db.pool"}
    allowed |= {"paymanager.db.sql", "paymanager.db.migrations", "paymanager.logging", "paymanager.rate_text"}
    allowed |= {"paymanager.tracing"}
    root = Path(paymanager.jobs.__file__).parent
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("paymanager"):
                assert any(node.module == a or node.module.startswith(a + ".") for a in allowed), (
                    f"{path.name} imports {node.module}"
                )
