"""The one settings parser, and every namespace the package owns refusing unknown names."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from platform_common.jobs import ConfigurationError, make_job_store
from platform_common.jobs.env import (
    FALSE_WORDS,
    LATENCY_BUCKETS_VARIABLE,
    QUEUE_PREFIX_VARIABLE,
    TRUE_WORDS,
    check_int,
    check_latency_buckets,
    check_positive,
    parse_bool,
    parse_choice,
    parse_duration,
    parse_float,
    parse_int,
    parse_latency_buckets,
    parse_list,
    parse_name,
    read_namespace,
    read_variable,
    settings_of,
    written,
)
from platform_common.jobs.keys import DEFAULT_LATENCY_BUCKETS, QUEUE_PREFIX
from platform_common.jobs.queue.queue_settings import ENV_SETTINGS, QueueSettings
from platform_common.jobs.queue.queue_settings import ENV_VARIABLES as QUEUE_VARIABLES
from platform_common.jobs.store.factory import AGENT_ENV, ENV_NAMESPACES, StoreConfig
from platform_common.jobs.validation import is_finite_number, is_int
from platform_common.jobs_exporter.settings import (
    DEPRECATED_VARIABLES,
    ENVIRONMENT_VARIABLES,
    ExporterSettings,
)

ROOT = Path(__file__).resolve().parent.parent
SETTING = "SOME_SETTING"


def _cases(words: frozenset[str]) -> st.SearchStrategy[str]:
    """The words in any letter case, with stray blanks around them."""
    return st.sampled_from(sorted(words)).flatmap(
        lambda word: st.tuples(
            st.lists(st.booleans(), min_size=len(word), max_size=len(word)),
            st.sampled_from(["", " ", "\t"]),
        ).map(
            lambda drawn: (
                drawn[1]
                + "".join(c.upper() if up else c for c, up in zip(word, drawn[0], strict=True))
                + drawn[1]
            )
        )
    )


# --- booleans ---------------------------------------------------------------------------


@given(_cases(TRUE_WORDS))
def test_every_spelling_of_true(raw: str) -> None:
    assert parse_bool(raw, SETTING) is True


@given(_cases(FALSE_WORDS))
def test_every_spelling_of_false(raw: str) -> None:
    assert parse_bool(raw, SETTING) is False


@given(st.text(max_size=12))
def test_anything_else_is_an_error_naming_setting_and_value(raw: str) -> None:
    if raw.strip().lower() in TRUE_WORDS | FALSE_WORDS:
        return
    with pytest.raises(ConfigurationError) as caught:
        parse_bool(raw, SETTING)
    assert caught.value.setting == SETTING
    assert repr(raw) in str(caught.value)


# --- numbers ------------------------------------------------------------------------------


@given(st.integers(min_value=-(10**17), max_value=10**17))
def test_ints_round_trip(number: int) -> None:
    assert parse_int(f" {number} ", SETTING) == number


@pytest.mark.parametrize("raw", ["", "1.0", "1e3", "1_000", "٣", "0x10", "ten", "9" * 5000])
def test_what_is_not_an_int(raw: str) -> None:
    with pytest.raises(ConfigurationError, match=SETTING):
        parse_int(raw, SETTING)


def test_int_bounds_are_inclusive() -> None:
    assert parse_int("1", SETTING, minimum=1, maximum=3) == 1
    assert parse_int("3", SETTING, minimum=1, maximum=3) == 3
    for raw in ("0", "4"):
        with pytest.raises(ConfigurationError, match=f"got {int(raw)}"):
            parse_int(raw, SETTING, minimum=1, maximum=3)


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_floats_round_trip(number: float) -> None:
    assert parse_float(repr(number), SETTING) == number


@pytest.mark.parametrize("raw", ["nan", "inf", "-inf", "", "one", "1,5"])
def test_what_is_not_a_finite_float(raw: str) -> None:
    with pytest.raises(ConfigurationError, match=SETTING):
        parse_float(raw, SETTING)


def test_float_bounds() -> None:
    assert parse_float("0.5", SETTING, minimum=0.5, maximum=1) == 0.5
    with pytest.raises(ConfigurationError, match=r">= 0\.5"):
        parse_float("0.4", SETTING, minimum=0.5)


# --- durations ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [("30", 30.0), ("1.5", 1.5), (" 2 ", 2.0), ("500ms", 0.5), ("30s", 30.0), ("2m", 120.0),
     ("1h", 3600.0), ("1.5H", 5400.0), ("250 ms", 0.25), ("1e1", 10.0)],
)  # fmt: skip
def test_durations(raw: str, seconds: float) -> None:
    assert parse_duration(raw, SETTING) == pytest.approx(seconds)


@pytest.mark.parametrize("raw", ["0", "-1", "0ms", "nan", "inf", "1e999h", "ms", "5d", "", "1 5"])
def test_bad_durations(raw: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse_duration(raw, SETTING)
    assert caught.value.setting == SETTING and repr(raw) in str(caught.value)


@given(st.floats(min_value=1e-6, max_value=1e6), st.sampled_from(["ms", "s", "m", "h", ""]))
def test_any_positive_duration_in_any_unit(number: float, unit: str) -> None:
    scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "": 1}[unit]
    assert math.isclose(parse_duration(f"{number!r}{unit}", SETTING), number * scale)


@given(st.text(max_size=20))
def test_any_text_is_a_duration_or_a_configuration_error(raw: str) -> None:
    try:
        seconds = parse_duration(raw, SETTING)
    except ConfigurationError as exc:
        assert exc.setting == SETTING
    else:
        assert math.isfinite(seconds) and seconds > 0


def test_duration_maximum() -> None:
    assert parse_duration("1m", SETTING, maximum=60) == 60
    with pytest.raises(ConfigurationError, match="at most"):
        parse_duration("61s", SETTING, maximum=60)


# --- lists, choices, names, buckets ---------------------------------------------------


def test_lists_skip_blanks_and_parse_items() -> None:
    assert parse_list(" a, b ,,c,", SETTING) == ("a", "b", "c")
    assert parse_list("", SETTING) == ()
    assert parse_list("1, 2", SETTING, parse_int) == (1, 2)
    with pytest.raises(ConfigurationError, match="'x'"):
        parse_list("1, x", SETTING, parse_int)


def test_choices_and_names() -> None:
    assert parse_choice(" INFO ", SETTING, ("debug", "info")) == "info"
    with pytest.raises(ConfigurationError, match="one of debug, info"):
        parse_choice("loud", SETTING, ("debug", "info"))
    assert parse_name(" dining ", SETTING) == "dining"
    with pytest.raises(ConfigurationError, match=SETTING):
        parse_name("Dining Room", SETTING)


def test_latency_buckets() -> None:
    assert parse_latency_buckets("0.5, 1, 2m", SETTING) == (0.5, 1.0, 120.0)
    for raw in ("", "5,1", "1,1", "1,-2", "1,inf"):
        with pytest.raises(ConfigurationError, match=SETTING):
            parse_latency_buckets(raw, SETTING)
    assert check_latency_buckets(SETTING, DEFAULT_LATENCY_BUCKETS) == DEFAULT_LATENCY_BUCKETS


# --- guards on typed values -------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "integer", "number"),
    [(1, True, True), (0, True, True), (True, False, False), (False, False, False),
     (1.0, False, True), (math.nan, False, False), (math.inf, False, False),
     ("1", False, False), (None, False, False)],
)  # fmt: skip
def test_bools_are_never_ints_or_numbers(value: object, integer: bool, number: bool) -> None:
    assert is_int(value) is integer
    assert is_finite_number(value) is number


def test_checks_name_the_setting() -> None:
    assert check_int("size", 3, minimum=1) == 3
    assert check_positive("wait", 2) == 2.0
    for bad in (True, 0, 1.5, "3"):
        with pytest.raises(ConfigurationError, match=r"^size: must be an int >= 1"):
            check_int("size", bad, minimum=1)
    with pytest.raises(ConfigurationError, match="between 1 and 2"):
        check_int("size", 3, minimum=1, maximum=2)
    for bad in (True, 0, -1, math.nan, "2"):
        with pytest.raises(ConfigurationError, match=r"^wait: must be a positive number"):
            check_positive("wait", bad)


# --- reading the environment -----------------------------------------------------------


def test_blank_means_unset() -> None:
    assert read_variable({"A": " "}, "A") is None
    assert read_variable({}, "A") is None
    assert read_variable({"A": "x"}, "A") == "x"
    assert read_namespace({"APP_X": "", "APP_Y": "1"}, "APP_", {"APP_X", "APP_Y"}) == {"APP_Y": "1"}


def test_an_unknown_name_suggests_the_closest_known_one() -> None:
    known = {"APP_CONCURRENCY", "APP_TIMEOUT"}
    with pytest.raises(ConfigurationError) as caught:
        read_namespace({"APP_CONCURENCY": "4", "OTHER": "x"}, "APP_", known)
    assert caught.value.setting == "APP_CONCURENCY"
    assert "did you mean APP_CONCURRENCY?" in str(caught.value)
    with pytest.raises(ConfigurationError, match="known: APP_CONCURRENCY, APP_TIMEOUT"):
        read_namespace({"APP_ZZZ": ""}, "APP_", known)  # blank, but still a wrong name


@pytest.mark.parametrize(
    ("name", "value"),
    [("APP_EXPORTER_SERVICE_HOST", "10.0.0.7"), ("APP_EXPORTER_SERVICE_PORT", "9808"),
     ("APP_EXPORTER_SERVICE_PORT_METRICS", "9808"), ("APP_EXPORTER_PORT", "tcp://10.0.0.7:9808"),
     ("APP_EXPORTER_PORT_9808_TCP", "tcp://10.0.0.7:9808"),
     ("APP_EXPORTER_PORT_9808_TCP_ADDR", "10.0.0.7"), ("APP_PORT", "udp://10.0.0.8:53")],
)  # fmt: skip
def test_kubernetes_service_links_pass(name: str, value: str) -> None:
    assert read_namespace({name: value}, "APP_", {"APP_TIMEOUT"}) == {}


def test_a_port_that_is_not_a_service_link_is_still_unknown() -> None:
    with pytest.raises(ConfigurationError, match="APP_PORT"):
        read_namespace({"APP_PORT": "8080"}, "APP_", {"APP_TIMEOUT"})


# --- every owned namespace is strict ----------------------------------------------------


def test_queue_namespace_refuses_unknown_names() -> None:
    with pytest.raises(ConfigurationError) as caught:
        QueueSettings.from_env({"QUEUE_LEASE_SECOND": "2"})
    assert caught.value.setting == "QUEUE_LEASE_SECOND"
    assert "QUEUE_LEASE_SECONDS" in str(caught.value)
    # The queue-exporter Service's links, injected into every pod of its namespace.
    links = {"QUEUE_EXPORTER_SERVICE_HOST": "10.0.0.7", "QUEUE_EXPORTER_PORT": "tcp://x:9808"}
    assert QueueSettings.from_env(links) == QueueSettings.from_env({})


def test_store_namespaces_refuse_unknown_names() -> None:
    for name in ("JOB_STORE_URI", "JOBSTATE_TIME_INDEX", "JOBSTATE_LIST_SCAN_CAPS"):
        with pytest.raises(ConfigurationError) as caught:
            make_job_store(environ={name: "1"})
        assert caught.value.setting == name
    # OpenTelemetry's namespace is not ours: other OTEL_* variables are left alone.
    config = StoreConfig.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"})
    assert config.agent == "default-agent"


def test_exporter_namespace_refuses_unknown_names() -> None:
    with pytest.raises(ConfigurationError) as caught:
        ExporterSettings.from_env({"EXPORTER_PROT": "9000"})
    assert caught.value.setting == "EXPORTER_PROT"
    assert "EXPORTER_PORT" in str(caught.value)
    # The exporter reads two queue variables; the others are the workers' to check.
    assert ExporterSettings.from_env({"QUEUE_MAX_ATTEMPTS": "5"}).port == 9808


def test_every_variable_is_documented_in_one_table() -> None:
    # The generated settings table of docs/reference.md (docs/operations.md links to it).
    text = (ROOT / "docs/reference.md").read_text(encoding="utf-8")
    section = text.split("<!-- settings-table:start -->", 1)[1].split("<!-- settings-table:end")[0]
    documented = set(re.findall(r"`([A-Z][A-Z0-9_]+)`", section))
    read = (
        QUEUE_VARIABLES
        | set(ENVIRONMENT_VARIABLES)
        | set(DEPRECATED_VARIABLES)
        | {AGENT_ENV, "REDIS_URL"}
        | set().union(*ENV_NAMESPACES.values())
    )
    assert read <= documented, sorted(read - documented)


def test_each_queue_setting_is_declared_once_with_what_reads_it() -> None:
    """Every field carries its parser and help (no second table of variables); the
    parser of each variable reads the default, written out, back as the default."""
    fields = {field.name for field in dataclasses.fields(QueueSettings)}
    assert set(settings_of(QueueSettings)) == fields
    assert {name for name, _ in ENV_SETTINGS.values()} == fields | {"pool_max", "pool_timeout"}
    assert set(ENV_SETTINGS) == QUEUE_VARIABLES
    defaults = QueueSettings()
    for variable, (name, declared) in ENV_SETTINGS.items():
        assert declared.help.strip(), variable
        if name != "redis":  # the URL's default is a fallback chain (see from_env)
            default = getattr(defaults, name)
            assert declared.parse(written(default), variable) == default, variable


# --- one declaration of the queue prefix and buckets -----------------------------------


def test_the_queue_and_the_exporter_read_the_same_variables() -> None:
    assert {QUEUE_PREFIX_VARIABLE, LATENCY_BUCKETS_VARIABLE} <= QUEUE_VARIABLES
    assert {QUEUE_PREFIX_VARIABLE, LATENCY_BUCKETS_VARIABLE} <= set(ENVIRONMENT_VARIABLES)
    queue, exporter = QueueSettings.from_env({}), ExporterSettings.from_env({})
    assert queue.prefix == exporter.queue_prefix == QUEUE_PREFIX
    assert queue.latency_buckets == exporter.latency_buckets == DEFAULT_LATENCY_BUCKETS


prefixes = st.from_regex(r"[a-z0-9][a-z0-9_.-]{0,20}", fullmatch=True)
bucket_lists = st.lists(
    st.floats(min_value=0.001, max_value=1e5), min_size=1, max_size=8, unique=True
).map(sorted)


@given(prefixes, bucket_lists)
def test_the_queue_and_the_exporter_agree_on_any_valid_value(
    prefix: str, buckets: list[float]
) -> None:
    env = {
        QUEUE_PREFIX_VARIABLE: prefix,
        LATENCY_BUCKETS_VARIABLE: ",".join(repr(bound) for bound in buckets),
    }
    queue, exporter = QueueSettings.from_env(env), ExporterSettings.from_env(env)
    assert queue.prefix == exporter.queue_prefix == prefix
    assert queue.latency_buckets == exporter.latency_buckets == tuple(buckets)


@given(st.text(max_size=12), st.text(max_size=20))
def test_the_queue_and_the_exporter_refuse_the_same_values(prefix: str, buckets: str) -> None:
    env = {QUEUE_PREFIX_VARIABLE: prefix, LATENCY_BUCKETS_VARIABLE: buckets}
    outcomes = []
    for build in (QueueSettings.from_env, ExporterSettings.from_env):
        try:
            build(env)
            outcomes.append(True)
        except ConfigurationError:
            outcomes.append(False)
    assert outcomes[0] == outcomes[1], env


def test_former_exporter_names_still_work_but_cannot_contradict() -> None:
    assert DEPRECATED_VARIABLES == {
        "EXPORTER_QUEUE_PREFIX": QUEUE_PREFIX_VARIABLE,
        "EXPORTER_LATENCY_BUCKETS": LATENCY_BUCKETS_VARIABLE,
    }
    old = ExporterSettings.from_env({"EXPORTER_QUEUE_PREFIX": "q", "QUEUE_PREFIX": " "})
    assert old.queue_prefix == "q"
    same = {"EXPORTER_LATENCY_BUCKETS": "1,2", "QUEUE_LATENCY_BUCKETS": "1,2"}
    assert ExporterSettings.from_env(same).latency_buckets == (1.0, 2.0)
    with pytest.raises(ConfigurationError) as caught:
        ExporterSettings.from_env({"EXPORTER_QUEUE_PREFIX": "a", "QUEUE_PREFIX": "b"})
    assert caught.value.setting == "EXPORTER_QUEUE_PREFIX"


# --- one pool setting ----------------------------------------------------------------------


def test_pool_max_is_the_redis_settings_max_connections() -> None:
    settings = QueueSettings.from_env({"QUEUE_POOL_MAX": "30", "QUEUE_POOL_TIMEOUT": "250ms"})
    assert settings.pool_max == settings.redis.max_connections == 30
    assert settings.pool_timeout == settings.redis.pool_timeout == 0.25
    from_url = QueueSettings.from_env({"QUEUE_REDIS_URL": "redis://h/0?max_connections=8"})
    assert from_url.pool_max == 8
    same = {"QUEUE_REDIS_URL": "redis://h/0?max_connections=8", "QUEUE_POOL_MAX": "8"}
    assert QueueSettings.from_env(same).pool_max == 8
    assert QueueSettings.from_url("redis://h/0?max_connections=8", pool_max=9).pool_max == 9
    overridden = QueueSettings().with_overrides(pool_max=40, pool_timeout=1.0)
    assert (overridden.redis.max_connections, overridden.redis.pool_timeout) == (40, 1.0)


@pytest.mark.parametrize(
    ("env", "setting"),
    [
        ({"QUEUE_REDIS_URL": "redis://h/0?max_connections=8", "QUEUE_POOL_MAX": "9"},
         "QUEUE_POOL_MAX"),
        ({"QUEUE_REDIS_URL": "redis://h/0?pool_timeout=1", "QUEUE_POOL_TIMEOUT": "2"},
         "QUEUE_POOL_TIMEOUT"),
        ({"QUEUE_POOL_MAX": "0"}, "pool_max"),
        ({"QUEUE_POOL_MAX": "2.5"}, "QUEUE_POOL_MAX"),
        ({"QUEUE_POOL_TIMEOUT": "-1"}, "QUEUE_POOL_TIMEOUT"),
        ({"QUEUE_POOL_MIN": "4", "QUEUE_POOL_MAX": "3"}, "pool_min"),
    ],
)  # fmt: skip
def test_bad_pool_settings(env: dict[str, str], setting: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        QueueSettings.from_env(env)
    assert caught.value.setting == setting


@pytest.mark.parametrize(
    ("variable", "huge"),
    [(f"QUEUE_{name}", "1e300") for name in (
        "LEASE_SECONDS", "REAPER_INTERVAL", "PROMOTE_INTERVAL", "HEARTBEAT_INTERVAL",
        "BLOCK_TIMEOUT", "CLEANUP_INTERVAL", "SHUTDOWN_TIMEOUT", "POOL_TIMEOUT",
        "BACKOFF_BASE", "BACKOFF_MAX", "BACKOFF_FACTOR", "DEAD_LETTER_RETENTION",
    )]
    + [(f"QUEUE_{name}", str(10**9)) for name in (
        "MAX_ATTEMPTS", "CLEANUP_BATCH", "FETCH_BATCH", "MAX_PAYLOAD_BYTES", "MAX_RESULT_BYTES",
        "POOL_MIN", "POOL_MAX", "DEAD_LETTER_MAX",
    )],
)  # fmt: skip
def test_every_numeric_queue_setting_has_an_upper_bound(variable: str, huge: str) -> None:
    """Defect: 1e300 s for an interval or a backoff was accepted at startup, then waited
    forever or wrote a due time in exponent notation."""
    with pytest.raises(ConfigurationError) as caught:
        QueueSettings.from_env({variable: huge})
    assert variable in str(caught.value)
    assert re.search(r"at most|between", str(caught.value)), caught.value


def test_the_upper_bounds_admit_generous_values() -> None:
    settings = QueueSettings.from_env(
        {"QUEUE_LEASE_SECONDS": "1h", "QUEUE_SHUTDOWN_TIMEOUT": "24h",
         "QUEUE_BACKOFF_MAX": "2592000", "QUEUE_MAX_ATTEMPTS": "1000",
         "QUEUE_FETCH_BATCH": "1000", "QUEUE_MAX_PAYLOAD_BYTES": str(16 << 20)},
    )  # fmt: skip
    assert (settings.lease_seconds, settings.shutdown_timeout) == (3600.0, 86_400.0)
    assert (settings.backoff_max, settings.max_attempts) == (2_592_000.0, 1000)


def test_range_errors_name_the_field_and_the_variable() -> None:
    with pytest.raises(ConfigurationError) as caught:
        QueueSettings.from_env({"QUEUE_MAX_ATTEMPTS": "0"})
    assert caught.value.setting == "max_attempts"
    assert "(from QUEUE_MAX_ATTEMPTS)" in str(caught.value)


def test_queue_durations_take_units_and_a_flag_url_wins() -> None:
    settings = QueueSettings.from_env(
        {"QUEUE_LEASE_SECONDS": "1m", "QUEUE_BLOCK_TIMEOUT": "500ms", "QUEUE_POOL_MAX": "7",
         "QUEUE_REDIS_URL": "redis://env-host/0", "QUEUE_MAX_ATTEMPTS": " "},
        redis_url="redis://flag-host/1",
    )  # fmt: skip
    assert (settings.lease_seconds, settings.block_timeout) == (60.0, 0.5)
    assert settings.max_attempts == 3  # blank is unset
    assert (settings.redis.host, settings.redis.db, settings.pool_max) == ("flag-host", 1, 7)
    with pytest.raises(ConfigurationError) as caught:
        QueueSettings.from_env({}, redis_url="http://x")
    assert caught.value.setting == "--redis-url"
