"""The one monitoring config: selectors, thresholds, SLOs and URLs for dashboards, alerts, runbooks.

Everything generated (dashboard JSON, Grafana provisioning, the Prometheus rule file,
promtool tests, runbooks) is a function of one `MonitoringConfig`, so a threshold can
never differ between an alert, its panel and its runbook. `make generate` uses
`MonitoringConfig.from_env()`: with no `QUEUE_MONITORING_*` variables set that is the
committed default.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from platform_common.jobs.errors import ConfigurationError

__all__ = ["ENV_PREFIX", "MonitoringConfig"]

ENV_PREFIX = "QUEUE_MONITORING_"

_DURATION = re.compile(r"(?:\d+[smh])+")
_NAMESPACE = re.compile(r"(?:[a-zA-Z_][a-zA-Z0-9_]*)?")
_LABEL_VALUE = re.compile(r"[A-Za-z0-9_.:/-]+")
_UID = re.compile(r"[A-Za-z0-9_-]{1,40}")


@dataclass(frozen=True, slots=True)
class MonitoringConfig:
    """Site settings and thresholds; every field is validated in `__post_init__`."""

    namespace: str = ""
    """Metric name prefix the exporter runs with (default none: the spec's exact names)."""
    job: str = "queue-exporter"
    """Prometheus `job` label of the exporter's scrape; alerts select on it."""
    exporter_url: str = "http://queue-exporter:9808"
    """Where on-call reaches the exporter (curl commands in runbooks)."""
    runbook_base_url: str = ""
    """Base of every `runbook_url`; empty means the exporter's own `/runbooks/`."""
    grafana_url: str = "http://grafana:3000"
    prometheus_url: str = "http://prometheus:9090"
    datasource_uid: str = "queue-prometheus"
    """Fixed uid of the provisioned Prometheus datasource the alert queries use."""
    grafana_folder: str = "Queue"
    grafana_dashboards_path: str = "/var/lib/grafana/dashboards/platform-common-jobs"
    """Where the dashboards provider reads `dashboards/*.json` inside the Grafana container."""

    queue_depth_high: int = 100
    queue_depth_high_for: str = "5m"
    queue_idle_for: str = "10m"
    dead_letter_high: int = 10
    failure_ratio_high: float = 0.10
    job_ttl_seconds: float = 60.0
    """The payload spec's TTL; per agent type overrides in `job_ttl_overrides`."""
    job_ttl_overrides: Mapping[str, float] = field(default_factory=dict)
    latency_slo_fraction_of_ttl: float = 0.5
    """Default p95 SLO = this fraction of the agent type's job TTL: a result that
    arrives after the TTL is thrown away, so half the TTL leaves room for retries."""
    latency_slo_overrides: Mapping[str, float] = field(default_factory=dict)

    rule_interval: str = "1m"
    """Evaluation interval of the Grafana rule group and the Prometheus rule group."""
    for_override: str | None = None
    """Test settings only: replaces every alert's `for` (see `test_settings()`)."""

    def __post_init__(self) -> None:
        if not _NAMESPACE.fullmatch(self.namespace):
            raise ConfigurationError("namespace", f"not a metric name prefix: {self.namespace!r}")
        if not _LABEL_VALUE.fullmatch(self.job):
            raise ConfigurationError("job", f"not a plain label value: {self.job!r}")
        for name in ("exporter_url", "grafana_url", "prometheus_url", "runbook_base_url"):
            value = getattr(self, name)
            if name == "runbook_base_url" and value == "":
                continue
            parts = urlsplit(value)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ConfigurationError(name, f"must be an absolute http(s) URL: {value!r}")
        if not _UID.fullmatch(self.datasource_uid):
            raise ConfigurationError("datasource_uid", "1-40 characters of [A-Za-z0-9_-]")
        for name in ("queue_depth_high_for", "queue_idle_for", "rule_interval"):
            if not _DURATION.fullmatch(getattr(self, name)):
                raise ConfigurationError(name, f"not a duration like 5m: {getattr(self, name)!r}")
        if self.for_override is not None and not _DURATION.fullmatch(self.for_override):
            raise ConfigurationError("for_override", f"not a duration: {self.for_override!r}")
        positive = {
            "queue_depth_high": self.queue_depth_high,
            "dead_letter_high": self.dead_letter_high,
            "job_ttl_seconds": self.job_ttl_seconds,
            **{f"job_ttl_overrides[{k}]": v for k, v in self.job_ttl_overrides.items()},
            **{f"latency_slo_overrides[{k}]": v for k, v in self.latency_slo_overrides.items()},
        }
        for name, value in positive.items():
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ConfigurationError(name, f"must be a positive number, got {value!r}")
        for name, ratio in (
            ("failure_ratio_high", self.failure_ratio_high),
            ("latency_slo_fraction_of_ttl", self.latency_slo_fraction_of_ttl),
        ):
            if not 0 < ratio <= 1:
                raise ConfigurationError(name, f"must be in (0, 1], got {ratio!r}")
        for name, mapping in (
            ("job_ttl_overrides", self.job_ttl_overrides),
            ("latency_slo_overrides", self.latency_slo_overrides),
        ):
            for agent_type in mapping:
                if not _LABEL_VALUE.fullmatch(agent_type):
                    raise ConfigurationError(name, f"not an agent type: {agent_type!r}")

    # -- derived -------------------------------------------------------------
    @property
    def runbook_base(self) -> str:
        """Base URL ending in '/', default the exporter's own `/runbooks/`."""
        base = self.runbook_base_url or f"{self.exporter_url.rstrip('/')}/runbooks/"
        return base if base.endswith("/") else base + "/"

    def runbook_url(self, alert_name: str) -> str:
        return self.runbook_base + alert_name

    def dashboard_url(self, dashboard_uid: str, panel_id: int | None = None) -> str:
        url = f"{self.grafana_url.rstrip('/')}/d/{dashboard_uid}"
        return url if panel_id is None else f"{url}?viewPanel={panel_id}"

    @property
    def default_latency_slo(self) -> float:
        return self.job_ttl_seconds * self.latency_slo_fraction_of_ttl

    def latency_slos(self) -> dict[str, float]:
        """Explicit p95 SLO per agent type: overrides, and SLOs derived from TTL overrides."""
        derived = {
            agent_type: ttl * self.latency_slo_fraction_of_ttl
            for agent_type, ttl in self.job_ttl_overrides.items()
        }
        return dict(sorted({**derived, **self.latency_slo_overrides}.items()))

    def job_ttls(self) -> dict[str, float]:
        return dict(sorted(self.job_ttl_overrides.items()))

    # -- constructors -----------------------------------------------------------
    def test_settings(self, for_: str = "2s", interval: str = "1s") -> MonitoringConfig:
        """The same alerts with every `for` shortened, for end-to-end tests."""
        return replace(self, for_override=for_, rule_interval=interval)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> MonitoringConfig:
        """Site URLs and names from `QUEUE_MONITORING_*` variables; the rest default."""
        env = os.environ if environ is None else environ
        names = (
            "namespace",
            "job",
            "exporter_url",
            "runbook_base_url",
            "grafana_url",
            "prometheus_url",
            "datasource_uid",
            "grafana_folder",
            "grafana_dashboards_path",
        )
        known = {ENV_PREFIX + name.upper() for name in names}
        unknown = sorted(key for key in env if key.startswith(ENV_PREFIX) and key not in known)
        if unknown:
            raise ConfigurationError(unknown[0], f"unknown setting; known: {sorted(known)}")
        values: dict[str, Any] = {
            name: env[ENV_PREFIX + name.upper()]
            for name in names
            if ENV_PREFIX + name.upper() in env
        }
        return cls(**values)
