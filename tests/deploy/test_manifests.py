"""Every Kubernetes manifest, validated offline: core objects against the Kubernetes
schemas (kubernetes-validate, strict), KEDA's ScaledObject, the ServiceMonitor and the
PrometheusRule against small schemas of our own (schemas/), and the worker files against
the command that writes them (`agentjobs deploy render`)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
import yaml

from platform_common.jobs import acl
from platform_common.jobs.cli import main
from platform_common.jobs.metric_catalogue import AGENT_TYPE, CATALOGUE
from platform_common.jobs.queue import DEFAULT_AGENT_TYPES, QueueSettings
from platform_common.jobs_monitoring import outputs
from platform_common.jobs_monitoring.kubernetes import ECHO_HANDLER, PROMETHEUS_RULE_FILE
from tests.deploy.kube_schemas import KUBERNETES_VERSION, own_schema, validate_object
from tests.support.paths import REPO_ROOT
from tests.support.prometheus import promtool

KUBERNETES = REPO_ROOT / "deploy" / "kubernetes"
WORKERS = KUBERNETES / "workers"
AGENT_TYPES = DEFAULT_AGENT_TYPES  # the examples' (scripts/generate.py renders them)


def _objects() -> list[tuple[str, dict[str, Any]]]:
    listed = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())["resources"]
    return [
        (f"{name}#{index}", document)
        for name in listed
        for index, document in enumerate(yaml.safe_load_all((KUBERNETES / name).read_text()))
    ]


OBJECTS = _objects()


def test_kustomize_lists_every_manifest() -> None:
    listed = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())["resources"]
    present = sorted(
        str(p.relative_to(KUBERNETES))
        for p in KUBERNETES.rglob("*.yaml")
        if p.name != "kustomization.yaml"
    )
    assert sorted(listed) == present


@pytest.mark.parametrize(("where", "document"), OBJECTS, ids=[w for w, _ in OBJECTS])
def test_each_object_passes_its_schema(where: str, document: dict[str, Any]) -> None:
    validate_object(document)


def test_our_schemas_catch_a_wrong_field() -> None:
    [scaled] = [d for _, d in OBJECTS if d["kind"] == "ScaledObject"][:1]
    broken = json.loads(json.dumps(scaled))
    broken["spec"]["triggers"][0]["metadata"]["treshold"] = "10"  # the typo a user makes
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, own_schema("ScaledObject"))
    [rule] = [d for _, d in OBJECTS if d["kind"] == "PrometheusRule"]
    broken = json.loads(json.dumps(rule))
    broken["spec"]["groups"][0]["rules"][0]["fore"] = "5m"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, own_schema("PrometheusRule"))


def test_worker_files_are_what_the_command_writes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Each example names the command line that made it; run so, it writes them all, byte
    # for byte (scripts/generate.py --check catches a stale one the same way).
    [command] = {path.read_text().splitlines()[1] for path in WORKERS.glob("*.yaml")}
    args = shlex.split(command.removeprefix("#   agentjobs "))
    assert args[:2] == ["deploy", "render"] and args[-2:] == ["--out", "DIR"]
    assert main([*args[:-1], str(tmp_path)]) == 0, capsys.readouterr().err
    written = {path.name: path.read_text() for path in tmp_path.iterdir()}
    assert written == {path.name: path.read_text() for path in WORKERS.glob("*.yaml")}
    assert sorted(written) == sorted([f"{t}.yaml" for t in AGENT_TYPES] + [PROMETHEUS_RULE_FILE])


def test_the_examples_say_they_run_the_echo_handler() -> None:
    for path in WORKERS.glob("*.yaml"):
        header = "".join(line for line in path.read_text().splitlines(True) if line[0] == "#")
        assert f"The handler is the package's echo ({ECHO_HANDLER})" in header, path


def test_the_prometheus_rule_carries_the_rule_file() -> None:
    [rule] = [d for _, d in OBJECTS if d["kind"] == "PrometheusRule"]
    rule_file = yaml.safe_load((REPO_ROOT / outputs.PROMETHEUS_RULES).read_text())
    assert rule["spec"] == rule_file and rule_file["groups"][0]["rules"]


def _workers() -> list[dict[str, dict[str, Any]]]:
    return [
        {d["kind"]: d for d in yaml.safe_load_all((WORKERS / f"{t}.yaml").read_text())}
        for t in AGENT_TYPES
    ]


@pytest.mark.parametrize("objects", _workers(), ids=AGENT_TYPES)
def test_each_worker_set_holds_together(objects: dict[str, dict[str, Any]]) -> None:
    deployment, budget, scaled = (
        objects[k] for k in ("Deployment", "PodDisruptionBudget", "ScaledObject")
    )
    pod = deployment["spec"]["template"]
    [container] = pod["spec"]["containers"]
    agent_type = container["args"][container["args"].index("--agent-type") + 1]
    env = {e["name"]: e for e in container["env"]}
    # Kubernetes waits longer than the worker's own shutdown timeout before SIGKILL.
    settings = QueueSettings.from_env(
        {"QUEUE_SHUTDOWN_TIMEOUT": env["QUEUE_SHUTDOWN_TIMEOUT"]["value"]}
    )
    assert pod["spec"]["terminationGracePeriodSeconds"] > settings.shutdown_timeout
    # The liveness check is the heartbeat probe for this worker's own id and type.
    assert container["args"][container["args"].index("--worker-id") + 1] == "$(POD_NAME)"
    probe = " ".join(container["livenessProbe"]["exec"]["command"])
    assert "platform_common.jobs.heartbeat_probe" in probe and f"--agent-type {agent_type}" in probe
    assert container["startupProbe"]["exec"] == container["livenessProbe"]["exec"]
    assert {"requests", "limits"} <= set(container["resources"])
    # Credentials: the URL names this type's worker user and a mounted password file.
    url = env["REDIS_URL"]["value"]
    assert (
        url.startswith(f"rediss://worker-{agent_type}@") and "password_file=/etc/redis-auth/" in url
    )
    secrets = {v["secret"]["secretName"] for v in pod["spec"]["volumes"]}
    assert f"redis-worker-{agent_type}-auth" in secrets
    # The PDB and the ScaledObject act on exactly these pods / this Deployment.
    assert budget["spec"]["selector"] == deployment["spec"]["selector"]
    assert scaled["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    assert "replicas" not in deployment["spec"]  # KEDA owns the count
    assert scaled["spec"]["minReplicaCount"] >= 1  # workers run the queue's chores too
    [trigger] = scaled["spec"]["triggers"]
    assert f'agent_type="{agent_type}"' in trigger["metadata"]["query"]
    assert trigger["metadata"]["ignoreNullValues"] == "false"


def test_the_worker_acl_user_exists_for_each_type() -> None:
    # The user the URL names is made with `agentjobs acl --role worker --agent-types <t>`:
    # scoped to that type's keys, and to no other type's.
    for agent_type in AGENT_TYPES:
        tokens = " ".join(acl.rules("worker", agent_types=[agent_type]))
        assert f"jobs:{{{agent_type}}}:" in tokens
        assert "~jobs:{*}" not in tokens  # (the queue prefix; store agents stay unscoped)


def test_the_redis_example_uses_the_conf_fragment() -> None:
    [statefulset] = [d for _, d in OBJECTS if d["kind"] == "StatefulSet"]
    [container] = statefulset["spec"]["template"]["spec"]["containers"]
    assert container["args"][0] == "/etc/redis/queue.conf"
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {"/etc/redis/queue.conf", "/etc/redis/users.acl"} <= mounts


def test_the_scaler_query_reads_series_the_exporter_serves() -> None:
    # A misspelt metric is no error to KEDA: the query returns nothing and the
    # ScaledObject sits on its fallback. Every name it reads is in the exporter's catalogue
    # with the agent_type label it filters on.
    served = {metric.name: metric for metric in CATALOGUE}
    for objects in _workers():
        [trigger] = objects["ScaledObject"]["spec"]["triggers"]
        names = re.findall(r"([a-z_]+)\{", trigger["metadata"]["query"])
        assert names
        for name in names:
            assert name in served and AGENT_TYPE in served[name].labels, name


def test_the_docs_give_the_kubernetes_version_the_manifests_are_checked_against() -> None:
    # The pinned validator checks against its newest Kubernetes unless told: the docs'
    # command names the version this module checks, and runs as written.
    command = f"kubernetes-validate --strict --kubernetes-version {KUBERNETES_VERSION}"
    operations = " ".join((REPO_ROOT / "docs" / "operations.md").read_text().split())
    assert f"`{command}`" in operations
    minor = KUBERNETES_VERSION.rpartition(".")[0]
    validator = Path(sys.executable).parent / "kubernetes-validate"
    done = subprocess.run(
        [str(validator), *command.split()[1:], str(KUBERNETES / "deployment.yaml")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"against version {minor}" in done.stdout + done.stderr


REPLICAS = ("queue-exporter-0:9808", "queue-exporter-1:9808")
"""Two exporter replicas behind one job: each reports the same queue."""


@pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool")
@pytest.mark.parametrize("objects", _workers(), ids=AGENT_TYPES)
def test_the_scaler_counts_a_queue_once_however_many_exporters_report_it(
    objects: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    # 30 waiting and 10 running, reported alike by both replicas: the scaler must see 40
    # (4 replicas' worth at 10 each), as the alerts do (max by), not 80.
    [trigger] = objects["ScaledObject"]["spec"]["triggers"]
    agent_type = objects["Deployment"]["metadata"]["labels"]["platform-common-jobs/agent-type"]
    series = [
        {
            "series": f'{name}{{job="queue-exporter", instance="{instance}", '
            f'agent_type="{agent_type}"}}',
            "values": f"{value}x5",
        }
        for instance in REPLICAS
        for name, value in (("queue_depth", 30), ("jobs_in_progress", 10))
    ]
    (tmp_path / "none.rules.yml").write_text("groups: []\n")
    check = {
        "rule_files": ["none.rules.yml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {
                        "expr": trigger["metadata"]["query"],
                        "eval_time": "2m",
                        "exp_samples": [
                            {
                                "labels": f'{{job="queue-exporter", agent_type="{agent_type}"}}',
                                "value": 40,
                            }
                        ],
                    }
                ],
            }
        ],
    }
    (tmp_path / "scaler.test.yml").write_text(yaml.safe_dump(check, sort_keys=False))
    done = promtool("test", "rules", str(tmp_path / "scaler.test.yml"))
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl (kustomize built in)")
def test_kustomize_builds_the_tree_offline() -> None:
    # `kubectl kustomize` needs no cluster: what `kubectl apply -k` would send, object by
    # object, is what the schemas above checked.
    built = subprocess.run(
        ["kubectl", "kustomize", str(KUBERNETES)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    rendered = sorted(
        (d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(built.stdout) if d
    )
    assert rendered == sorted((d["kind"], d["metadata"]["name"]) for _, d in OBJECTS)
