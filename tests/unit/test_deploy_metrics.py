"""The alert rules and the Grafana dashboard name only series the code exports, and the rules parse."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from prometheus_client import REGISTRY

import paymanager.api.errors
import paymanager.api.http_metrics
import paymanager.jobs.metrics
import paymanager.ledger.metrics
import paymanager.metrics.psp
import paymanager.metrics.webhooks  # noqa: F401
from paymanager.application.admin.gauges import register_gauges
from paymanager.metrics import QUERY_GAUGES

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
SERIES = re.compile(r"paymanager_[a-z_]+")


def exported() -> set[str]:
    register_gauges(QUERY_GAUGES)
    names = set(QUERY_GAUGES.names)
    for family in REGISTRY.collect():
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
    for collector in list(REGISTRY._collector_to_names):  # the declared names of empty families
        names.update(REGISTRY._collector_to_names[collector])
    return names


def test_alert_rules_and_dashboard_use_exported_series() -> None:
    rules = (DEPLOY / "prometheus" / "alerts.yml").read_text()
    groups = yaml.safe_load(rules)["groups"]
    assert all("expr" in rule and "alert" in rule for group in groups for rule in group["rules"])
    dashboard = json.loads((DEPLOY / "grafana" / "paymanager.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    used = set(SERIES.findall(rules)) | {name for expr in exprs for name in SERIES.findall(expr)}
    missing = sorted(used - exported())
    assert not missing, f"series used in deploy/ that no code exports: {missing}"
