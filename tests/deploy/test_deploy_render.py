"""`agentjobs deploy render`: what it writes for a site passes the schemas and carries the
site's settings; its help works; a bad or missing option is one line and exit 2, with
nothing written; it never overwrites a file it did not write."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from platform_common.jobs.cli import main
from platform_common.jobs_monitoring.alerts.prometheus_rules import rule_file
from platform_common.jobs_monitoring.site import load_config
from tests.cli.runner import child_env, one_error_line, run
from tests.deploy.kube_schemas import validate_object
from tests.support.paths import REPO_ROOT

IMAGE = "registry.acme.test/jobs-workers:1.4.2"
HANDLER = "acme.handlers:handle"
PROMETHEUS = "http://prometheus.monitoring.svc:9090"


def render(
    folder: Path, capsys: pytest.CaptureFixture[str], *extra: str, **options: str
) -> tuple[int, str, str]:
    """Run the command in this process, writing into `folder` unless `out` says otherwise
    (an option given as "" is left out); (exit status, stdout, stderr)."""
    given = {
        "--image": IMAGE,
        "--handler": HANDLER,
        "--agent-types": "billing,search",
        "--prometheus-url": PROMETHEUS,
        "--out": str(folder),
        **{f"--{k.replace('_', '-')}": v for k, v in options.items()},
    }
    args = [word for option, value in given.items() if value for word in (option, value)]
    status = main(["deploy", "render", *args, *extra])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def documents(out: Path) -> dict[str, list[dict[str, Any]]]:
    return {path.name: list(yaml.safe_load_all(path.read_text())) for path in out.iterdir()}


def test_a_site_s_manifests_pass_the_schemas_and_carry_its_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    site = tmp_path / "site.yaml"
    site.write_text("namespace: acme\njob: acme-exporter\nqueue_depth_high: 250\n")
    out = tmp_path / "manifests"
    status, stdout, stderr = render(
        out, capsys, "--site", str(site), "--namespace", "jobs", "--concurrency", "4",
        "--redis-address", "redis.data.svc.cluster.local:6379",
    )  # fmt: skip
    assert status == 0, stderr
    assert stderr == ""  # no echo handler: nothing to warn about
    found = documents(out)
    assert sorted(found) == ["billing.yaml", "prometheus-rule.yaml", "search.yaml"]
    assert sorted(stdout.splitlines()) == [f"wrote {out / name}" for name in sorted(found)]
    for name, objects in found.items():
        for document in objects:
            validate_object(document)
            assert document["metadata"]["namespace"] == "jobs", name
    deployment, _, scaled = found["billing.yaml"]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == IMAGE
    assert container["args"][:6] == ["--agent-type", "billing", "--handler", HANDLER,
                                     "--concurrency", "4"]  # fmt: skip
    [redis_url] = [e["value"] for e in container["env"] if e["name"] == "REDIS_URL"]
    assert redis_url.startswith("rediss://worker-billing@redis.data.svc.cluster.local:6379/0?")
    [trigger] = scaled["spec"]["triggers"]
    assert trigger["metadata"]["serverAddress"] == PROMETHEUS
    assert trigger["metadata"]["threshold"] == "4"
    # The site's metric prefix and exporter job, as the alerts select them.
    query = trigger["metadata"]["query"]
    assert 'acme_queue_depth{job="acme-exporter", agent_type="billing"}' in query
    assert 'acme_jobs_in_progress{job="acme-exporter", agent_type="billing"}' in query
    [rule] = found["prometheus-rule.yaml"]
    assert rule["spec"] == rule_file(load_config(site))
    [depth] = [r for r in rule["spec"]["groups"][0]["rules"] if r["alert"] == "QueueDepthHigh"]
    assert depth["expr"].endswith(" > 250") and 'job="acme-exporter"' in depth["expr"]


def test_the_prometheus_url_defaults_to_the_site_s(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, err = render(tmp_path, capsys, prometheus_url="")
    assert status == 0, err
    [_, _, scaled] = documents(tmp_path)["billing.yaml"]
    address = scaled["spec"]["triggers"][0]["metadata"]["serverAddress"]
    assert address == load_config().prometheus_url
    assert "namespace" not in scaled["metadata"]  # none asked for: kubectl's


def test_the_echo_handler_is_said_aloud(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    echo = "platform_common.jobs.queue.builtin:echo"
    status, _, err = render(tmp_path, capsys, handler=echo)
    assert status == 0
    assert err == (
        f"warning: --handler {echo} is the package's echo: each job's result is its own "
        "payload, the workers do no work\n"
    )
    assert f"The handler is the package's echo ({echo})" in (tmp_path / "search.yaml").read_text()
    status, _, err = render(tmp_path, capsys)  # rendered again with a real handler
    assert status == 0 and err == ""
    assert "echo" not in (tmp_path / "search.yaml").read_text()


def test_help_works() -> None:
    done = run("deploy", "render", "--help")
    assert done.returncode == 0, done.stderr
    for option in ("--image", "--handler", "--agent-types", "--prometheus-url", "--namespace",
                   "--out", "--site"):  # fmt: skip
        assert option in done.stdout, option
    group = run("deploy", "--help")
    assert group.returncode == 0 and "render" in group.stdout


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"image": ""}, "error: --image: required"),
        ({"handler": ""}, "error: --handler: required"),
        ({"agent_types": ""}, "error: --agent-types: required"),
        ({"out": ""}, "error: --out: required"),
        ({"image": "Registry/Image With Space"}, "error: --image: not an image reference"),
        ({"handler": "acme.handlers"}, "error: --handler: expected pkg.module:function"),
        ({"agent_types": " , "}, "error: --agent-types: names no agent type"),
        ({"agent_types": "billing,billing"}, "error: --agent-types: names an agent type twice"),
        ({"agent_types": "billing_v2"}, "error: --agent-types: 'billing_v2' cannot name Kuber"),
        ({"agent_types": "Billing"}, "error: --agent-types: 'Billing' must be 1-63 chars"),
        ({"prometheus_url": "prometheus:9090"}, "error: --prometheus-url: must be an absolute"),
        ({"namespace": "Jobs_NS"}, "error: --namespace: not a Kubernetes namespace"),
        ({"concurrency": "many"}, "error: --concurrency: "),
        ({"concurrency": "0"}, "error: --concurrency: "),
        ({"redis_address": "redis.data.svc"}, "error: --redis-address: expected host:port"),
        ({"redis_address": "redis:99999"}, "error: --redis-address: expected host:port"),
    ],
)
def test_a_bad_option_is_one_line_exit_2_and_nothing_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], options: dict[str, str], message: str
) -> None:
    out = tmp_path / "manifests"
    status, stdout, stderr = render(out, capsys, **options)
    assert status == 2
    assert stdout == "" and len(stderr.splitlines()) == 1, stderr
    assert stderr.startswith(message), stderr
    assert not out.exists()


def test_a_bad_site_file_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    site = tmp_path / "site.yaml"
    site.write_text("queue_depth_hihg: 250\n")
    status, _, stderr = render(tmp_path / "out", capsys, "--site", str(site))
    assert status == 2 and len(stderr.splitlines()) == 1
    assert stderr.startswith("error: queue_depth_hihg: unknown site setting")
    assert "did you mean 'queue_depth_high'?" in stderr
    assert not (tmp_path / "out").exists()


def test_a_file_it_did_not_write_stops_it_before_any_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mine = tmp_path / "search.yaml"
    mine.write_text("# my own search worker\nkind: Deployment\n")
    status, stdout, stderr = render(tmp_path, capsys)
    assert status == 1 and stdout == ""
    assert stderr == (
        f"error: {tmp_path}: search.yaml not written by this command; move them or choose "
        "another --out (nothing written)\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["search.yaml"]
    assert mine.read_text() == "# my own search worker\nkind: Deployment\n"


def test_without_the_monitoring_extra_it_says_so_in_one_line(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "sys.modules['yaml'] = None\n"  # PyYAML not installed: the `monitoring` extra's
        "from platform_common.jobs.cli import main\n"
        f"sys.exit(main(['deploy', 'render', '--image', 'i', '--handler', 'a:b', "
        f"'--agent-types', 'x', '--out', {str(tmp_path)!r}]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT, env=child_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert one_error_line(done) == (
        "error: `deploy render` needs the 'monitoring' extra (no module 'yaml'): "
        "pip install 'platform-common-jobs[monitoring]'"
    )
    assert list(tmp_path.iterdir()) == []
