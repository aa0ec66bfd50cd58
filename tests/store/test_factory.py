"""make_job_store(): backend by JOB_STORE_URL, agent by OTEL_SERVICE_NAME, clear config errors."""

from __future__ import annotations

import logging

import pytest

import platform_common.jobs as jobs
from platform_common.jobs import (
    ConfigurationError,
    InMemoryJobStore,
    JobStatus,
    RedisJobStore,
    make_job_store,
)
from platform_common.jobs.store import factory
from platform_common.jobs.store.factory import StoreConfig


@pytest.mark.parametrize("url", [None, "", "memory://", "memory:"])
def test_unset_or_memory_url_gives_the_memory_store(url: str | None) -> None:
    env = {} if url is None else {"JOB_STORE_URL": url}
    store = make_job_store(environ=env)
    assert isinstance(store, InMemoryJobStore)
    assert store.agent == "default-agent" and not store.time_index and store.list_scan_cap == 5000


@pytest.mark.parametrize(
    ("url", "tls"),
    [
        ("redis://localhost:6379/0", False),
        ("rediss://:pw@cache.example:6380/0", True),
        ("redis+sentinel://s1:26379,s2:26379/mymaster/0", False),
    ],
)
def test_redis_urls_give_the_redis_store_without_connecting(url: str, tls: bool) -> None:
    store = make_job_store(environ={"JOB_STORE_URL": url, "OTEL_SERVICE_NAME": "Discovery-Agent"})
    assert isinstance(store, RedisJobStore)
    assert store.agent == "discovery-agent"  # lower-cased
    assert store.settings.tls is tls
    assert store.settings.setting_name == "JOB_STORE_URL"


@pytest.mark.parametrize(
    "url",
    [
        "postgres://db/jobs",
        "redis://:hunter2@host:notaport/0",
        "redis://:hunter2@/0",
        "memory://somewhere",
        "http://[::1",
    ],
)
def test_bad_urls_name_the_variable_and_hide_the_password(url: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        make_job_store(environ={"JOB_STORE_URL": url})
    assert info.value.setting == "JOB_STORE_URL"
    assert "JOB_STORE_URL" in str(info.value)
    assert "hunter2" not in str(info.value)


@pytest.mark.parametrize(
    ("env", "setting"),
    [
        ({"OTEL_SERVICE_NAME": "bad name!"}, "OTEL_SERVICE_NAME"),
        ({"OTEL_SERVICE_NAME": "x" * 64}, "OTEL_SERVICE_NAME"),
        ({"JOBSTATE_TIME_INDEX_ENABLED": "maybe"}, "JOBSTATE_TIME_INDEX_ENABLED"),
        ({"JOBSTATE_TIME_INDEX_READS": "true"}, "JOBSTATE_TIME_INDEX_READS"),  # no writes
        ({"JOBSTATE_LIST_SCAN_CAP": "0"}, "JOBSTATE_LIST_SCAN_CAP"),
        ({"JOBSTATE_LIST_SCAN_CAP": "lots"}, "JOBSTATE_LIST_SCAN_CAP"),
        ({"JOBSTATE_TIME_INDEX": "true"}, "JOBSTATE_TIME_INDEX"),  # a typo, not "off"
        ({"JOB_STORE_URI": "redis://h/0"}, "JOB_STORE_URI"),  # a typo, not the memory store
    ],
)
def test_bad_settings_name_themselves(env: dict[str, str], setting: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        make_job_store(environ=env)
    assert info.value.setting == setting


def test_index_switches_and_scan_cap_come_from_the_environment() -> None:
    config = StoreConfig.from_env(
        {"JOBSTATE_TIME_INDEX_ENABLED": "true", "JOBSTATE_LIST_SCAN_CAP": "250"}
    )
    assert config.index_writes and config.index_reads and config.list_scan_cap == 250
    store = make_job_store(environ={"JOBSTATE_TIME_INDEX_ENABLED": "1"})
    assert store.index_writes and store.index_reads and store.time_index
    writes_only = make_job_store(environ={"JOBSTATE_TIME_INDEX_WRITES": "1"})
    assert writes_only.index_writes and not writes_only.index_reads
    assert not writes_only.time_index


def test_arguments_override_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOB_STORE_URL", "redis://localhost/0")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
    store = make_job_store("memory://", agent="explicit")
    assert isinstance(store, InMemoryJobStore) and store.agent == "explicit"
    assert make_job_store().agent == "from-env"


def test_redis_without_a_service_name_warns(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="platform_common.jobs.store.factory"):
        make_job_store(environ={"JOB_STORE_URL": "redis://localhost/0"})
    assert "OTEL_SERVICE_NAME is not set" in caplog.text


def test_the_public_api() -> None:
    assert sorted(jobs.__all__) == sorted(
        [
            "BackendBusy", "BackendOutOfMemory", "BackendUnavailable", "BackfillReport",
            "ConfigurationError", "CorruptQueueState", "IllegalTransition",
            "InvalidCursor", "InvalidJobId", "InvalidRecord", "InvalidTTL", "InMemoryJobStore",
            "JobConflict", "JobNotFound", "JobRecord", "JobStatus", "JobStore", "JobsError",
            "Page", "RedisJobStore", "ValidationError", "VersionConflict", "make_job_store",
        ]
    )  # fmt: skip
    for name in jobs.__all__:
        assert getattr(jobs, name) is not None
    assert JobStatus.SUCCEEDED.value == "succeeded" and isinstance(JobStatus.SUCCEEDED, str)


def test_an_unset_url_warns_once_that_jobs_stay_in_memory(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(factory, "_warned_memory_fallback", False)
    with caplog.at_level(logging.WARNING, logger="platform_common.jobs.store.factory"):
        make_job_store(environ={})
        make_job_store(environ={})
        make_job_store("memory://", environ={})  # chosen on purpose: no warning
    warnings = [r for r in caplog.records if "JOB_STORE_URL is not set" in r.getMessage()]
    assert len(warnings) == 1
    assert "memory only" in warnings[0].getMessage()
