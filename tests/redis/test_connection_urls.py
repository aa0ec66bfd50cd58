"""RedisSettings.from_url: redis://, rediss://, cluster and redis+sentinel:// forms, and
the errors bad URLs get (naming the setting, never the password)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from platform_common.jobs.errors import ConfigurationError, JobsError
from platform_common.jobs.redis.url import RedisSettings, redact_url

SECRET = "s3cr3t-pa55word"


def test_plain_url_keeps_its_meaning() -> None:
    settings = RedisSettings.from_url("redis://Example.com:6380/2")
    assert (settings.host, settings.port, settings.db) == ("example.com", 6380, 2)
    assert settings.addresses == (("example.com", 6380),)
    assert settings.sentinel_service is None
    assert not settings.tls and not settings.cluster


def test_defaults_port_and_db() -> None:
    settings = RedisSettings.from_url("redis://localhost")
    assert (settings.port, settings.db) == (6379, 0)


def test_tls_with_client_certificate() -> None:
    settings = RedisSettings.from_url(
        "rediss://u:p@h:6390/0?ssl_ca_certs=/ca.crt&ssl_certfile=/c.crt&ssl_keyfile=/c.key"
    )
    kwargs = settings.client_kwargs()
    assert kwargs["ssl"] is True
    assert (kwargs["ssl_ca_certs"], kwargs["ssl_certfile"], kwargs["ssl_keyfile"]) == (
        "/ca.crt",
        "/c.crt",
        "/c.key",
    )


def test_cluster_with_several_startup_nodes() -> None:
    settings = RedisSettings.from_url("redis://a:7000,b:7001,[::1]:7002/0?cluster=true")
    assert settings.cluster
    assert settings.addresses == (("a", 7000), ("b", 7001), ("::1", 7002))
    assert settings.redacted_url() == "redis://a:7000,b:7001,::1:7002/0?cluster=true"


def test_url_options_use_the_shared_parser() -> None:
    settings = RedisSettings.from_url(
        "redis://h:1/0?cluster=ON&pool_timeout=250ms&socket_timeout=2s&max_connections=7"
    )
    assert settings.cluster and settings.max_connections == 7
    assert (settings.pool_timeout, settings.socket_timeout) == (0.25, 2.0)
    assert not RedisSettings.from_url("redis://h:1/0?cluster=off").cluster


def test_sentinel_url() -> None:
    settings = RedisSettings.from_url(
        f"redis+sentinel://app:{SECRET}@s1:26380,s2,s3:26381/mymaster/3"
    )
    assert settings.sentinel_service == "mymaster"
    assert settings.db == 3
    assert settings.addresses == (("s1", 26380), ("s2", 26379), ("s3", 26381))
    assert (settings.username, settings.password) == ("app", SECRET)
    assert not settings.tls
    assert SECRET not in settings.redacted_url()
    assert SECRET not in repr(settings)
    assert (
        settings.redacted_url() == "redis+sentinel://app:***@s1:26380,s2:26379,s3:26381/mymaster/3"
    )


def test_sentinel_tls_and_sentinel_password_file(tmp_path: Path) -> None:
    secret_file = tmp_path / "sentinel.pw"
    secret_file.write_text(SECRET + "\n")
    settings = RedisSettings.from_url(
        f"rediss+sentinel://s1/svc?ssl_ca_certs=/ca.crt&sentinel_password_file={secret_file}"
    )
    assert settings.tls and settings.db == 0
    assert settings.sentinel_password == SECRET
    assert SECRET not in repr(settings)


def test_settings_stay_frozen() -> None:
    settings = RedisSettings.from_url("redis+sentinel://s1/svc")
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.sentinel_service = "other"  # type: ignore[misc,unused-ignore]


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        (f"http://u:{SECRET}@h:1/0", "scheme"),
        (f"redis://u:{SECRET}@/0", "no host"),
        (f"redis://u:{SECRET}@h:99999/0", "port"),
        (f"redis://u:{SECRET}@h:port/0", "port"),
        (f"redis://u:{SECRET}@h/x", "database"),
        (f"redis://u:{SECRET}@h/0/1", "path"),
        (f"redis://u:{SECRET}@h/²", "database"),
        (f"redis://u:{SECRET}@h1,h2/0", "several hosts"),
        (f"redis://u:{SECRET}@h/1?cluster=true", "only database 0"),
        (f"redis://u:{SECRET}@h/0?cluster=maybe", "cluster"),
        (f"redis://u:{SECRET}@h/0?sentinel_password_file=/x", "unknown URL option"),
        (f"redis+sentinel://u:{SECRET}@s1", "service name"),
        (f"redis+sentinel://u:{SECRET}@s1/bad%20name", "service name"),
        (f"redis+sentinel://u:{SECRET}@s1/svc/x", "database"),
        (f"redis+sentinel://u:{SECRET}@s1/svc?cluster=true", "cannot be combined"),
        (f"redis+sentinel://u:{SECRET}@s1,/svc", "no host"),
        (f"redis+sentinel://u:{SECRET}@s1/svc?password_file=/nonexistent/pw", "password_file"),
        (f"redis://u:{SECRET}@h/0?socket_timeout=-1", "positive"),
        (f"redis://u:{SECRET}@h/0?pool_timeout=nan", "pool_timeout"),
        (f"redis://u:{SECRET}@h/0?max_connections=0.5", "max_connections"),
        (f"redis://u:{SECRET}@h/0?max_connections=0", "max_connections"),
    ],
)
def test_bad_urls_name_the_setting_and_hide_the_password(url: str, fragment: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        RedisSettings.from_url(url, setting_name="JOB_STORE_URL")
    message = str(caught.value)
    assert caught.value.setting.startswith("JOB_STORE_URL")
    assert fragment in message
    assert SECRET not in message


def test_port_typo_does_not_echo_what_may_be_a_password() -> None:
    with pytest.raises(ConfigurationError) as caught:
        RedisSettings.from_url(f"redis://h:{SECRET}")
    assert SECRET not in str(caught.value)


def test_redact_url_handles_multi_host_netlocs() -> None:
    redacted = redact_url(f"redis+sentinel://u:{SECRET}@a:1,b:2/svc")
    assert redacted == "redis+sentinel://u:***@a:1,b:2/svc"


@given(st.text(max_size=80))
def test_any_text_is_a_url_or_a_configuration_error(text: str) -> None:
    # Hypothesis: whatever a deployment puts in the variable, the answer is settings or
    # our own error, never an IndexError/ValueError from deep inside the parser.
    for url in (text, "redis://" + text, "redis+sentinel://" + text):
        try:
            settings = RedisSettings.from_url(url)
        except JobsError as exc:
            assert isinstance(exc, ConfigurationError)
        else:
            assert settings.host and settings.addresses


@given(
    st.lists(
        st.tuples(st.from_regex(r"[a-z][a-z0-9.-]{0,20}", fullmatch=True), st.integers(1, 65535)),
        min_size=1,
        max_size=5,
    ),
    st.from_regex(r"[A-Za-z0-9._-]{1,30}", fullmatch=True),
    st.integers(0, 15),
)
def test_sentinel_url_round_trips(hosts: list[tuple[str, int]], service: str, db: int) -> None:
    netloc = ",".join(f"{host}:{port}" for host, port in hosts)
    settings = RedisSettings.from_url(f"redis+sentinel://{netloc}/{service}/{db}")
    assert settings.addresses == tuple(hosts)
    assert settings.sentinel_service == service
    assert settings.db == db
    assert RedisSettings.from_url(settings.redacted_url()) == settings
