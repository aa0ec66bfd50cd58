"""ExporterSettings: flags over environment over defaults; bad values name the setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from platform_common.jobs.errors import ConfigurationError
from platform_common.jobs_exporter.settings import (
    MAX_HEARTBEAT_WINDOW_SECONDS,
    MAX_REDIS_TIMEOUT_SECONDS,
    OPTIONS,
    ExporterSettings,
    build_parser,
    default_text,
)


def test_defaults_need_no_configuration() -> None:
    settings = ExporterSettings.from_args([], {})
    assert (settings.host, settings.port) == ("0.0.0.0", 9808)
    assert settings.redis.host == "localhost"
    assert settings.agent_types == ()
    assert settings.namespace == ""
    assert settings.max_agent_types == 200
    assert settings.heartbeat_window_ms == 30_000


def test_help_shows_each_fields_default() -> None:
    """--help's defaults are read from the fields (declared once): each is shown, and
    giving the shown value as the flag changes nothing."""
    shown = " ".join(build_parser().format_help().split())
    defaults = ExporterSettings.from_args([], {})
    for name, option in OPTIONS.items():
        text = default_text(name)
        assert f"(default {text or 'none'}) [{option.variable}]" in shown, name
        if text and option.flag is not None:
            given = ExporterSettings.from_args([option.flag, text], {})
            if name == "redis":  # its errors name the flag it came from instead
                assert given.redis.redacted_url() == defaults.redis.redacted_url()
            else:
                assert given == defaults, name


def test_flags_win_over_environment() -> None:
    env = {
        "REDIS_URL": "redis://env-host:1/0",
        "EXPORTER_PORT": "9000",
        "EXPORTER_AGENT_TYPES": "dining, flights,dining",
        "EXPORTER_NAMESPACE": "env_ns",
        "EXPORTER_HEARTBEAT_WINDOW_SECONDS": "7.5",
    }
    settings = ExporterSettings.from_args(
        ["--redis-url", "redis://flag-host:2/3", "--port", "9100"], env
    )
    assert (settings.redis.host, settings.redis.port, settings.redis.db) == ("flag-host", 2, 3)
    assert settings.port == 9100
    assert settings.agent_types == ("dining", "flights")  # deduplicated, order kept
    assert settings.namespace == "env_ns"
    assert settings.heartbeat_window_ms == 7500


@pytest.mark.parametrize(
    ("argv", "env", "named"),
    [
        (["--port", "http"], {}, "--port"),
        ([], {"EXPORTER_PORT": "70000"}, "EXPORTER_PORT"),
        (["--max-agent-types", "0"], {}, "--max-agent-types"),
        ([], {"EXPORTER_AGENT_TYPES": "Dining Room"}, "EXPORTER_AGENT_TYPES"),
        (["--namespace", "my-team"], {}, "--namespace"),
        (["--heartbeat-window", "-1"], {}, "--heartbeat-window"),
        ([], {"EXPORTER_REDIS_TIMEOUT_SECONDS": "nan"}, "EXPORTER_REDIS_TIMEOUT_SECONDS"),
        (["--log-level", "loud"], {}, "--log-level"),
        (["--queue-prefix", "jobs{x}"], {}, "--queue-prefix"),
        (["--redis-url", "http://localhost"], {}, "--redis-url"),
        ([], {"REDIS_URL": "redis://localhost/zero"}, "REDIS_URL"),
        (["--agent-types", "a,b,c", "--max-agent-types", "2"], {}, "--max-agent-types"),
        ([], {"EXPORTER_PROT": "9000"}, "EXPORTER_PROT"),
        ([], {"QUEUE_PREFIX": "Jobs"}, "QUEUE_PREFIX"),
        ([], {"QUEUE_LATENCY_BUCKETS": "5,1"}, "QUEUE_LATENCY_BUCKETS"),
    ],
)
def test_bad_value_names_the_setting(argv: list[str], env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        ExporterSettings.from_args(argv, env)
    assert caught.value.setting == named
    assert str(caught.value).startswith(f"{named}: ")


def test_password_never_in_repr_or_errors(tmp_path: Path) -> None:
    secret = "hunter2-very-secret"
    settings = ExporterSettings.from_args([], {"REDIS_URL": f"redis://exporter:{secret}@h:1/0"})
    assert settings.redis.password == secret
    assert secret not in repr(settings)
    assert secret not in settings.redis.redacted_url()
    with pytest.raises(ConfigurationError) as caught:
        ExporterSettings.from_args([], {"REDIS_URL": f"redis://exporter:{secret}@h:1/x"})
    assert secret not in str(caught.value)


def test_password_file(tmp_path: Path) -> None:
    secret_file = tmp_path / "password"
    secret_file.write_text("from-a-file\n")
    url = f"rediss://exporter@h:1/0?password_file={secret_file}&ssl_ca_certs=/ca.pem"
    settings = ExporterSettings.from_args(["--redis-url", url], {})
    assert settings.redis.password == "from-a-file"
    assert settings.redis.tls and settings.redis.ssl_ca_certs == "/ca.pem"
    with pytest.raises(ConfigurationError, match="password_file"):
        ExporterSettings.from_args(["--redis-url", f"redis://h/0?password_file={tmp_path}/no"], {})


def test_cli_reports_bad_setting_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    from platform_common.jobs_exporter.__main__ import main

    assert main(["--port", "not-a-port", "--redis-url", "redis://u:pw-secret@h:1/0"]) == 2
    err = capsys.readouterr().err
    assert "--port" in err
    assert "pw-secret" not in err


def test_queue_prefix_and_buckets_are_the_queues_variables() -> None:
    env = {"QUEUE_PREFIX": "myjobs", "QUEUE_LATENCY_BUCKETS": "0.5, 1, 2m"}
    settings = ExporterSettings.from_env(env)
    assert settings.queue_prefix == "myjobs"
    assert settings.latency_buckets == (0.5, 1.0, 120.0)
    assert ExporterSettings.from_args(["--queue-prefix", "flag"], env).queue_prefix == "flag"


def test_blank_variables_are_unset_and_durations_take_units() -> None:
    env = {"EXPORTER_PORT": "", "EXPORTER_REDIS_TIMEOUT_SECONDS": "750ms"}
    settings = ExporterSettings.from_env(env)
    assert settings.port == 9808 and settings.redis_timeout == 0.75


@pytest.mark.parametrize(
    ("argv", "env", "named"),
    [
        (["--heartbeat-window", "1e308"], {}, "--heartbeat-window"),
        ([], {"EXPORTER_HEARTBEAT_WINDOW_SECONDS": "1e308"}, "EXPORTER_HEARTBEAT_WINDOW_SECONDS"),
        (["--heartbeat-window", "25h"], {}, "--heartbeat-window"),
        (["--redis-timeout", "1e308"], {}, "--redis-timeout"),
        ([], {"EXPORTER_REDIS_TIMEOUT_SECONDS": "301"}, "EXPORTER_REDIS_TIMEOUT_SECONDS"),
    ],
)
def test_durations_are_bounded_at_startup(argv: list[str], env: dict[str, str], named: str) -> None:
    # 1e308 s was accepted, then every scrape failed converting the window to ms (HTTP 500).
    with pytest.raises(ConfigurationError) as caught:
        ExporterSettings.from_args(argv, env)
    assert caught.value.setting == named
    assert "at most" in str(caught.value)


def test_durations_up_to_their_maximum_are_accepted() -> None:
    settings = ExporterSettings.from_args(
        ["--heartbeat-window", str(MAX_HEARTBEAT_WINDOW_SECONDS)],
        {"EXPORTER_REDIS_TIMEOUT_SECONDS": str(MAX_REDIS_TIMEOUT_SECONDS)},
    )
    assert settings.heartbeat_window_ms == 86_400_000
    assert settings.redis_timeout == 300


def test_cli_refuses_a_huge_heartbeat_window_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from platform_common.jobs_exporter.__main__ import main

    assert main(["--heartbeat-window", "1e308"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--heartbeat-window" in err and "Traceback" not in err
