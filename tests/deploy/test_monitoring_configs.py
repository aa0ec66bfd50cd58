"""The example Prometheus and Alertmanager configs, checked by their own tools: the
Prometheus config with the generated rules beside it (promtool), the Alertmanager config
with its templates (amtool), and the routes for the labels the alerts really carry."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from tests.support.paths import REPO_ROOT
from tests.support.prometheus import promtool

DEPLOY = REPO_ROOT / "deploy"
RULES = REPO_ROOT / "alerts" / "prometheus" / "queue-alerts.rules.yml"


def test_prometheus_config_loads_the_generated_rules(tmp_path: Path) -> None:
    # Laid out as compose.yaml mounts it: alerts/prometheus/ at rules/ beside the config.
    shutil.copy(DEPLOY / "prometheus" / "prometheus.yml", tmp_path / "prometheus.yml")
    shutil.copytree(RULES.parent, tmp_path / "rules")
    checked = promtool("check", "config", str(tmp_path / "prometheus.yml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "1 rule files found" in checked.stdout
    config = yaml.safe_load((tmp_path / "prometheus.yml").read_text())
    [manager] = config["alerting"]["alertmanagers"]
    assert manager["static_configs"][0]["targets"] == ["alertmanager:9093"]


# The Alertmanager config the stack mounts is alerts/alertmanager/, checked (amtool,
# every alert's route, the template) in tests/monitoring/test_alertmanager_example.py.
