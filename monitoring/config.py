"""The one monitoring config: selectors, thresholds, SLOs and URLs for dashboards, alerts, runbooks.

Everything generated (dashboard JSON, Grafana provisioning, the Prometheus rule file,
promtool tests, runbooks) is a function of one `MonitoringConfig`, so a threshold can
never differ between an alert, its panel and its runbook. The values come from the
site settings (`site.load_config`): `site.defaults.yaml`, overlaid by a site's file.
Fields have no Python defaults on purpose: the YAML file is the only place they live.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

from platform_common.jobs.env import check_latency_buckets
from platform_common.jobs.errors import ConfigurationError
from platform_common.jobs.keys import DEFAULT_LATENCY_BUCKETS
from platform_common.jobs.validation import is_finite_number

from .slo import SLO_KINDS, Objective, SloKind, SloOverride, check_objective, objectives_of

__all__ = ["DURATION_FIELDS", "TRACE_ID_PLACEHOLDER", "MonitoringConfig"]

TRACE_ID_PLACEHOLDER = "{trace_id}"
"""Where `trace_url` takes the trace id."""

_DURATION = re.compile(r"(?:\d+[smh])+")
_NAMESPACE = re.compile(r"(?:[a-zA-Z_][a-zA-Z0-9_]*)?")
_LABEL_VALUE = re.compile(r"[A-Za-z0-9_.:/-]+")
_UID = re.compile(r"[A-Za-z0-9_-]{1,40}")

DURATION_FIELDS = (
    "rule_interval",
    "queue_depth_high_for",
    "queue_idle_for",
    "latency_above_slo_for",
    "dead_letter_high_for",
    "exporter_down_for",
    "exporter_absent_for",
    "redis_unreachable_for",
    "no_active_workers_for",
    "failure_ratio_high_for",
    "oldest_job_over_ttl_for",
    "redis_eviction_policy_unsafe_for",
    "redis_memory_high_for",
    "expired_rate_high_for",
    "agent_types_dropped_for",
    "malformed_values_for",
    "queue_paused_too_long_for",
    "held_at_rate_limit_for",
    "fair_key_starving_for",
)
"""Fields holding a Prometheus duration (`5m`, `1h30m`): each alert's `for` and the interval."""


@dataclass(frozen=True, slots=True)
class MonitoringConfig:
    """Site settings and thresholds; every field is validated in `__post_init__`. What
    each field means: its comment in site.defaults.yaml, which users read and edit."""

    namespace: str
    job: str
    exporter_url: str
    runbook_base_url: str
    """Never the exporter: it is down when its own alerts fire."""
    grafana_url: str
    console_url: str
    prometheus_url: str
    trace_url: str
    datasource_uid: str
    grafana_folder: str
    grafana_dashboards_path: str
    """Where the dashboards provider reads `dashboards/*.json` inside the Grafana container."""
    rule_interval: str

    queue_depth_high: int
    queue_depth_high_for: str
    queue_idle_for: str
    dead_letter_high: int
    dead_letter_high_for: str
    failure_ratio_high: float
    failure_ratio_high_for: str
    job_ttl_seconds: float
    """The jobs' ttl_seconds (the payload's default)."""
    job_ttl_overrides: Mapping[str, float]
    oldest_job_over_ttl_for: str
    latency_slo_fraction_of_ttl: float
    """A result that arrives after the TTL is thrown away, so half the TTL (the default)
    leaves room for retries."""
    latency_slo_overrides: Mapping[str, float]
    latency_above_slo_for: str
    exporter_down_for: str
    exporter_absent_for: str
    redis_unreachable_for: str
    no_active_workers_for: str
    redis_eviction_policy_unsafe_for: str
    redis_memory_high: float
    redis_memory_high_for: str
    expired_rate_high: float
    expired_rate_high_for: str
    agent_types_dropped_for: str
    malformed_values_for: str
    queue_paused_too_long_for: str
    held_at_rate_limit_for: str
    fair_key_starving_ratio: float
    fair_key_starving_floor_seconds: float
    """A few seconds against a median of one is no starvation."""
    fair_key_starving_for: str

    slo_availability: Objective
    slo_latency: Objective
    slo_overrides: Mapping[str, SloOverride]
    latency_buckets: tuple[float, ...]
    alerts_off: tuple[str, ...]

    for_override: str | None = None
    """Test settings only, never a site setting: replaces every alert's `for`."""

    def __post_init__(self) -> None:
        if not _NAMESPACE.fullmatch(self.namespace):
            raise ConfigurationError("namespace", f"not a metric name prefix: {self.namespace!r}")
        if not _LABEL_VALUE.fullmatch(self.job):
            raise ConfigurationError("job", f"not a plain label value: {self.job!r}")
        optional = ("grafana_url", "console_url")
        for name in ("exporter_url", *optional, "prometheus_url", "runbook_base_url"):
            value = getattr(self, name)
            if name in optional and value == "":
                continue
            parts = urlsplit(value)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ConfigurationError(name, f"must be an absolute http(s) URL: {value!r}")
        if self.trace_url:
            parts = urlsplit(self.trace_url.replace(TRACE_ID_PLACEHOLDER, "x"))
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ConfigurationError("trace_url", f"must be an http(s) URL: {self.trace_url!r}")
            if self.trace_url.count(TRACE_ID_PLACEHOLDER) != 1 or "$" in self.trace_url:
                raise ConfigurationError(
                    "trace_url",
                    f"must hold {TRACE_ID_PLACEHOLDER} once (and no $): {self.trace_url!r}",
                )
        if not _UID.fullmatch(self.datasource_uid):
            raise ConfigurationError("datasource_uid", "1-40 characters of [A-Za-z0-9_-]")
        for name in DURATION_FIELDS:
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
            "fair_key_starving_floor_seconds": self.fair_key_starving_floor_seconds,
        }
        if not is_finite_number(self.fair_key_starving_ratio) or self.fair_key_starving_ratio <= 1:
            raise ConfigurationError(
                "fair_key_starving_ratio",
                f"must be a number above 1, got {self.fair_key_starving_ratio!r}",
            )
        for name, value in positive.items():
            if not is_finite_number(value) or value <= 0:
                raise ConfigurationError(name, f"must be a positive number, got {value!r}")
        if not is_finite_number(self.expired_rate_high) or self.expired_rate_high < 0:
            raise ConfigurationError(
                "expired_rate_high", f"must be a number >= 0, got {self.expired_rate_high!r}"
            )
        for name, ratio in (
            ("failure_ratio_high", self.failure_ratio_high),
            ("latency_slo_fraction_of_ttl", self.latency_slo_fraction_of_ttl),
            ("redis_memory_high", self.redis_memory_high),
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
        self._check_slos()

    def _check_slos(self) -> None:
        if self.latency_buckets:
            check_latency_buckets("latency_buckets", self.latency_buckets)
        bounds = self.histogram_bounds
        for kind in SLO_KINDS:
            default = self.slo_default(kind)
            check_objective(
                f"slo_{kind}", default.target, default.window,
                default.threshold_seconds, bounds,
            )  # fmt: skip
            if kind == "latency" and default.threshold_seconds is None:
                raise ConfigurationError("slo_latency.threshold_seconds", "missing")
        for agent_type, override in self.slo_overrides.items():
            if not _LABEL_VALUE.fullmatch(agent_type):
                raise ConfigurationError("slo_overrides", f"not an agent type: {agent_type!r}")
            for kind in SLO_KINDS:
                part = override.of(kind)
                if part is not None:
                    check_objective(
                        f"slo_overrides[{agent_type}].{kind}", part.target, part.window,
                        part.threshold_seconds, bounds,
                    )  # fmt: skip

    # -- derived -------------------------------------------------------------
    @property
    def runbook_base(self) -> str:
        """`runbook_base_url` ending in '/': the hosted runbook folder's index."""
        base = self.runbook_base_url
        return base if base.endswith("/") else base + "/"

    @property
    def runbook_index_url(self) -> str:
        """The hosted folder's index page (object storage serves no folder index)."""
        return f"{self.runbook_base}index.html"

    def runbook_url(self, alert_name: str) -> str:
        """The alert's page in the hosted folder (the file name a static host serves)."""
        return f"{self.runbook_base}{alert_name}.html"

    @staticmethod
    def dashboard_path(dashboard_uid: str, panel_id: int | None = None) -> str:
        """`/d/<uid>?viewPanel=<id>`: relative to whichever Grafana shows the link."""
        path = f"/d/{dashboard_uid}"
        return path if panel_id is None else f"{path}?viewPanel={panel_id}"

    def dashboard_url(self, dashboard_uid: str, panel_id: int | None = None) -> str:
        """The dashboard link outside Grafana: `grafana_url` + path, or the path alone."""
        return self.grafana_url.rstrip("/") + self.dashboard_path(dashboard_uid, panel_id)

    def console_type_url(self, agent_type: str) -> str:
        """The console page of `agent_type` (a literal or a template like
        `{{ $labels.agent_type }}`); "" when the site set no `console_url`."""
        if not self.console_url:
            return ""
        return f"{self.console_url.rstrip('/')}/types/{agent_type}"

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

    @property
    def histogram_bounds(self) -> tuple[float, ...]:
        """The latency histogram's finite bucket bounds the queue writes."""
        return self.latency_buckets or DEFAULT_LATENCY_BUCKETS

    def slo_default(self, kind: SloKind) -> Objective:
        """The objective of `kind` every agent type without an override has."""
        return self.slo_availability if kind == "availability" else self.slo_latency

    def slo_objectives(self, kind: SloKind) -> dict[str, Objective]:
        """The objective of `kind` of each agent type that overrides it (sorted)."""
        return objectives_of(self.slo_default(kind), self.slo_overrides, kind)

    def job_ttls(self) -> dict[str, float]:
        return dict(sorted(self.job_ttl_overrides.items()))

    def test_settings(self, for_: str = "2s", interval: str = "1s") -> MonitoringConfig:
        """The same alerts with every `for` shortened, for end-to-end tests."""
        return replace(self, for_override=for_, rule_interval=interval)
