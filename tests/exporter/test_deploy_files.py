"""The exporter's deployment files: consistent with each other and with its settings."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from platform_common.jobs_exporter.settings import ENVIRONMENT_VARIABLES, ExporterSettings
from tests.support.paths import REPO_ROOT

DEPLOY = REPO_ROOT / "deploy"


def test_prometheus_scrape_job_outlasts_the_exporter_timeout() -> None:
    # promtool checks the whole file in tests/deploy/test_monitoring_configs.py.
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    [job] = config["scrape_configs"]
    assert job["job_name"] == "queue-exporter"
    assert job["metrics_path"] == "/metrics"
    assert job["static_configs"][0]["targets"] == ["queue-exporter:9808"]
    # The scrape must outlast the exporter's own Redis timeout, or up 0 is never seen.
    assert _seconds(job["scrape_timeout"]) > ExporterSettings().redis_timeout


EXPORTER_FILES = ("configmap.yaml", "deployment.yaml", "service.yaml", "servicemonitor.yaml")


@pytest.fixture(scope="module")
def manifests() -> dict[str, dict[str, Any]]:
    """The exporter's objects by kind (tests/deploy checks the whole tree)."""
    documents: dict[str, dict[str, Any]] = {}
    for name in EXPORTER_FILES:
        for document in yaml.safe_load_all((DEPLOY / "kubernetes" / name).read_text()):
            documents[document["kind"]] = document
    return documents


def test_probes_point_at_the_exporter_endpoints(manifests: dict[str, dict[str, Any]]) -> None:
    [container] = manifests["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    port_names = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert container["livenessProbe"]["httpGet"]["port"] in port_names
    assert container["readinessProbe"]["httpGet"]["port"] in port_names
    env = {item["name"]: item["value"] for item in container["env"]}
    assert int(env["EXPORTER_PORT"]) == port_names["metrics"]
    assert container["command"] == ["queue-exporter"]  # the console script


def test_service_and_servicemonitor_select_the_pods(manifests: dict[str, dict[str, Any]]) -> None:
    deployment, service = manifests["Deployment"], manifests["Service"]
    monitor = manifests["ServiceMonitor"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {port["name"] for port in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"
    # job="queue-exporter", as the alerts and dashboards expect.
    assert service["metadata"]["labels"][monitor["spec"]["jobLabel"]] == "queue-exporter"


def test_configmap_carries_valid_settings_and_no_secret(
    manifests: dict[str, dict[str, Any]],
) -> None:
    data = manifests["ConfigMap"]["data"]
    assert {"REDIS_URL", "JOB_STORE_URL"} <= set(data)
    assert set(data) - {"JOB_STORE_URL"} <= set(ENVIRONMENT_VARIABLES)
    for name in ("REDIS_URL", "JOB_STORE_URL"):
        url = urlsplit(data[name])
        assert url.scheme == "rediss" and url.password is None  # secrets come from files
        assert {"ssl_ca_certs", "password_file"} <= set(parse_qs(url.query))
    # Every file the URL names is mounted into the container.
    [container] = manifests["Deployment"]["spec"]["template"]["spec"]["containers"]
    mounts = [mount["mountPath"] for mount in container["volumeMounts"]]
    for path in (values[0] for values in parse_qs(urlsplit(data["REDIS_URL"]).query).values()):
        assert any(path.startswith(mount + "/") for mount in mounts), path
    # The exporter accepts these values (the password file is only read in the pod).
    env = dict(data, REDIS_URL=data["REDIS_URL"].split("&password_file=")[0])
    settings = ExporterSettings.from_env(env)
    assert settings.agent_types == ("dining", "experiences", "transportation", "flights", "dmc")


def _seconds(duration: str) -> float:
    assert duration.endswith("s")
    return float(duration[:-1])
