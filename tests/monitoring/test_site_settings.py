"""Site settings: the defaults YAML holds every setting; a site file overlays it, and a bad
key, type or value is refused naming the key and the file it came from."""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from platform_common.jobs.errors import ConfigurationError
from platform_common.jobs.keys import DEFAULT_LATENCY_BUCKETS
from platform_common.jobs_monitoring.config import MonitoringConfig
from platform_common.jobs_monitoring.site import DEFAULTS_FILE, SITE_SETTINGS, load_config
from platform_common.jobs_monitoring.slo import Objective


def site_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "site.yaml"
    path.write_text(text)
    return path


def refused(tmp_path: Path, text: str) -> ConfigurationError:
    with pytest.raises(ConfigurationError) as caught:
        load_config(site_file(tmp_path, text))
    return caught.value


# -- the defaults --------------------------------------------------------------------


def test_defaults_file_sets_every_setting_and_only_those() -> None:
    document = yaml.safe_load(DEFAULTS_FILE.read_text())
    names = {f.name for f in fields(MonitoringConfig)} - {"for_override"}
    assert set(document) == names == set(SITE_SETTINGS)


def test_defaults_are_the_documented_ones() -> None:
    config = load_config()
    assert (config.job, config.namespace, config.datasource_uid) == (
        "queue-exporter",
        "",
        "queue-prometheus",
    )
    assert config.runbook_base == "http://localhost:8000/"
    assert config.runbook_url("QueueIdle") == "http://localhost:8000/QueueIdle.html"
    assert config.dashboard_url("queue-overview", 11) == "/d/queue-overview?viewPanel=11"
    assert (config.queue_depth_high, config.queue_depth_high_for) == (100, "5m")
    assert config.for_override is None
    # Numbers keep the config's types: an int in YAML widens to a float field.
    assert isinstance(config.job_ttl_seconds, float) and config.job_ttl_seconds == 60
    assert isinstance(config.queue_depth_high, int)


def test_no_site_file_and_an_empty_one_are_the_defaults(tmp_path: Path) -> None:
    assert load_config(None) == load_config(site_file(tmp_path, "# nothing to change\n"))


# -- a site's file ---------------------------------------------------------------------


def test_site_keys_replace_their_defaults_and_only_those(tmp_path: Path) -> None:
    site = site_file(
        tmp_path,
        "runbook_base_url: https://wiki.example/runbooks\n"
        "grafana_url: https://grafana.example\n"
        "queue_depth_high: 250\n"
        "latency_slo_overrides: {dining: 45}\n",
    )
    config = load_config(site)
    assert config.runbook_url("QueueIdle") == "https://wiki.example/runbooks/QueueIdle.html"
    assert config.dashboard_url("queue-overview", 11).startswith("https://grafana.example/d/")
    assert config.queue_depth_high == 250
    assert config.latency_slos() == {"dining": 45.0}
    expected = replace(
        load_config(),
        runbook_base_url="https://wiki.example/runbooks",
        grafana_url="https://grafana.example",
        queue_depth_high=250,
        latency_slo_overrides={"dining": 45.0},
    )
    assert config == expected


def test_unknown_key_is_refused_naming_it_and_the_file(tmp_path: Path) -> None:
    error = refused(tmp_path, "queue_depth_hihg: 5\n")
    assert error.setting == "queue_depth_hihg"
    assert "unknown site setting" in str(error) and "site.yaml" in str(error)
    assert "did you mean 'queue_depth_high'" in str(error)


def test_test_only_override_is_not_a_site_setting(tmp_path: Path) -> None:
    assert refused(tmp_path, "for_override: 1s\n").setting == "for_override"


@pytest.mark.parametrize(
    ("text", "setting", "expected"),
    [
        ('queue_depth_high: "100"\n', "queue_depth_high", "an integer"),
        ("queue_depth_high: 100.5\n", "queue_depth_high", "an integer"),
        ("queue_depth_high: true\n", "queue_depth_high", "an integer"),
        ('failure_ratio_high: "10%"\n', "failure_ratio_high", "a number"),
        ("queue_idle_for: 10\n", "queue_idle_for", "a string"),
        ("datasource_uid: null\n", "datasource_uid", "a string"),
        ("latency_slo_overrides: [45]\n", "latency_slo_overrides", "a mapping"),
        ("latency_slo_overrides: {dining: 45s}\n", "latency_slo_overrides[dining]", "a number"),
        ("job_ttl_overrides: {1: 30}\n", "job_ttl_overrides", "must be a string"),
    ],
)
def test_wrong_types_are_refused_naming_the_key(
    tmp_path: Path, text: str, setting: str, expected: str
) -> None:
    error = refused(tmp_path, text)
    assert error.setting == setting
    assert expected in error.problem and "site.yaml" in error.problem


@pytest.mark.parametrize(
    ("text", "setting"),
    [
        ("failure_ratio_high: 1.5\n", "failure_ratio_high"),
        ("queue_depth_high: 0\n", "queue_depth_high"),
        ("exporter_down_for: two minutes\n", "exporter_down_for"),
        ("runbook_base_url: wiki/runbooks\n", "runbook_base_url"),
        ("job_ttl_overrides: {dining: -1}\n", "job_ttl_overrides[dining]"),
    ],
)
def test_bad_values_are_refused_naming_the_key_and_the_file(
    tmp_path: Path, text: str, setting: str
) -> None:
    error = refused(tmp_path, text)
    assert error.setting == setting
    assert str(tmp_path / "site.yaml") in error.problem


def test_a_key_given_twice_is_refused(tmp_path: Path) -> None:
    error = refused(tmp_path, "queue_depth_high: 100\njob: a\nqueue_depth_high: 200\n")
    assert error.setting == "queue_depth_high" and "given twice" in error.problem
    assert ":3" in error.problem  # the line of the second one


@pytest.mark.parametrize(
    ("text", "problem"),
    [("- queue_depth_high\n", "must be a mapping"), ("job: [unclosed\n", "not valid YAML")],
)
def test_a_file_that_is_not_a_settings_mapping_is_refused(
    tmp_path: Path, text: str, problem: str
) -> None:
    error = refused(tmp_path, text)
    assert error.setting == str(tmp_path / "site.yaml") and problem in error.problem


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as caught:
        load_config(tmp_path / "nowhere.yaml")
    assert "cannot read" in caught.value.problem


# -- the config itself (tests and code build it directly too) --------------------------


@pytest.mark.parametrize(
    ("changes", "setting"),
    [
        ({"runbook_base_url": "queue-exporter/runbooks"}, "runbook_base_url"),
        ({"job": 'bad"job'}, "job"),
        ({"namespace": "9lives"}, "namespace"),
        ({"queue_depth_high": 0}, "queue_depth_high"),
        ({"queue_idle_for": "ten minutes"}, "queue_idle_for"),
        ({"failure_ratio_high": 1.5}, "failure_ratio_high"),
        ({"datasource_uid": "x" * 41}, "datasource_uid"),
        ({"latency_slo_overrides": {"dining": -1.0}}, "latency_slo_overrides[dining]"),
        ({"for_override": "soon"}, "for_override"),
    ],
)
def test_bad_settings_name_themselves(changes: dict[str, Any], setting: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        replace(load_config(), **changes)
    assert caught.value.setting == setting


# -- service-level objectives ------------------------------------------------------------


def test_slo_defaults_are_the_documented_ones() -> None:
    config = load_config()
    assert config.slo_availability == Objective(target=0.99, window="28d")
    assert config.slo_latency == Objective(target=0.95, window="28d", threshold_seconds=30.0)
    assert config.slo_overrides == {} and config.alerts_off == ()
    assert config.histogram_bounds == DEFAULT_LATENCY_BUCKETS  # latency_buckets: []


def test_an_agent_types_slo_override_changes_only_what_it_names(tmp_path: Path) -> None:
    config = load_config(
        site_file(
            tmp_path,
            "slo_overrides:\n"
            "  dining: {latency: {threshold_seconds: 60}}\n"
            "  flights: {availability: {target: 0.999, window: 4w}}\n",
        )
    )
    assert config.slo_objectives("latency") == {
        "dining": Objective(target=0.95, window="28d", threshold_seconds=60.0)
    }
    assert config.slo_objectives("availability") == {
        "flights": Objective(target=0.999, window="4w")
    }
    assert config.slo_latency.threshold_seconds == 30  # every other type keeps the default


def test_a_sites_own_buckets_decide_which_latency_thresholds_exist(tmp_path: Path) -> None:
    text = (
        "latency_buckets: [1, 20, 40]\n"
        "slo_latency: {target: 0.95, threshold_seconds: 20, window: 28d}\n"
    )
    config = load_config(site_file(tmp_path, text))
    assert config.histogram_bounds == (1.0, 20.0, 40.0)
    assert config.slo_latency.threshold_seconds == 20


@pytest.mark.parametrize(
    ("text", "setting", "expected"),
    [
        # unknown keys, at every level
        ("slo_latency: {target: 0.95, threshold_seconds: 30, window: 28d, le: 30}\n",
         "slo_latency.le", "unknown"),
        ("slo_availability: {target: 0.99, window: 28d, threshold_seconds: 30}\n",
         "slo_availability.threshold_seconds", "unknown"),
        ("slo_overrides: {dining: {latncy: {target: 0.99}}}\n",
         "slo_overrides[dining].latncy", "unknown"),
        ("slo_overrides: {dining: {latency: {objective: 0.99}}}\n",
         "slo_overrides[dining].latency.objective", "unknown"),
        # impossible values
        ("slo_availability: {target: 1, window: 28d}\n", "slo_availability.target", "(0, 1)"),
        ("slo_availability: {target: 1.5, window: 28d}\n", "slo_availability.target", "(0, 1)"),
        ("slo_availability: {target: 0.9, window: 28d}\n", "slo_availability.target",
         "could never fire"),
        ("slo_latency: {target: 0.95, threshold_seconds: 20, window: 28d}\n",
         "slo_latency.threshold_seconds", "not a bound of the latency histogram"),
        ("slo_overrides: {dining: {latency: {threshold_seconds: 45}}}\n",
         "slo_overrides[dining].latency.threshold_seconds", "not a bound"),
        ("slo_overrides: {dining: {availability: {target: 1}}}\n",
         "slo_overrides[dining].availability.target", "no error budget"),
        ("slo_availability: {target: 0.99, window: 2d}\n", "slo_availability.window",
         "shorter than the 3d"),
        ("slo_availability: {target: 0.99, window: a month}\n", "slo_availability.window",
         "not a duration"),
        ("latency_buckets: [30, 10]\n", "latency_buckets", "ascending"),
        # missing and mistyped
        ("slo_availability: {target: 0.99}\n", "slo_availability.window", "missing"),
        ("slo_latency: {target: 95%, threshold_seconds: 30, window: 28d}\n",
         "slo_latency.target", "a number"),
        ("slo_overrides: {dining: 0.99}\n", "slo_overrides[dining]", "a mapping"),
        ("slo_overrides: [dining]\n", "slo_overrides", "a mapping"),
        ("alerts_off: JobFailureRatioHigh\n", "alerts_off", "a list"),
        ("alerts_off: [1]\n", "alerts_off[0]", "a string"),
    ],
)  # fmt: skip
def test_bad_slos_are_refused_naming_the_key_and_the_file(
    tmp_path: Path, text: str, setting: str, expected: str
) -> None:
    error = refused(tmp_path, text)
    assert error.setting == setting
    assert expected in error.problem and str(tmp_path / "site.yaml") in error.problem
