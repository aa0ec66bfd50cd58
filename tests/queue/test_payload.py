"""Payload validation and queue settings: every bad field named, bad settings refused."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from platform_common.jobs import queue as queue_package
from platform_common.jobs import worker as worker_package
from platform_common.jobs.errors import ConfigurationError, InvalidPayload
from platform_common.jobs.queue import DEFAULT_AGENT_TYPES, JobPayload, QueueSettings
from platform_common.jobs.queue.payload import payload_errors, prepare_job
from platform_common.jobs.validation import MAX_TTL_SECONDS
from tests.support.queue_handlers import make_job


def test_the_spec_example_is_valid_and_round_trips() -> None:
    job = make_job(job_id="6c3f2a8e-1d4b-4f7a-9c2e-5b8d0e1f2a3b", created_at="2099-01-15T10:30:00Z")
    payload = JobPayload.from_dict(job, agent_types=DEFAULT_AGENT_TYPES, max_bytes=65536)
    assert payload.created_at == datetime(2099, 1, 15, 10, 30, tzinfo=UTC)
    assert payload.to_dict() == {**job, "created_at": "2099-01-15T10:30:00Z"}
    assert JobPayload.from_json(prepare_job(job).encoded) == payload


def test_every_bad_field_is_reported_at_once() -> None:
    bad = make_job(
        job_id="has spaces",
        session_id="",
        orchestrator_id=7,
        agent_type="plumbing",
        task=None,
        constraints=["not", "a", "dict"],
        curated_shortlist=["ok", 3],
        result_format="",
        created_at="yesterday",
        ttl_seconds=0,
        colour="blue",
    )
    with pytest.raises(InvalidPayload) as caught:
        prepare_job(bad, agent_types=DEFAULT_AGENT_TYPES)
    assert set(caught.value.errors) == {
        "job_id", "session_id", "orchestrator_id", "agent_type", "task", "constraints",
        "curated_shortlist", "result_format", "created_at", "ttl_seconds", "colour",
    }  # fmt: skip
    assert "unknown agent type 'plumbing'" in caught.value.errors["agent_type"]
    assert caught.value.errors["colour"] == "unknown field"


@pytest.mark.parametrize(
    ("change", "field", "fragment"),
    [
        ({"ttl_seconds": -5}, "ttl_seconds", "positive"),
        ({"ttl_seconds": True}, "ttl_seconds", "positive int"),
        ({"ttl_seconds": 1.5}, "ttl_seconds", "positive int"),
        ({"created_at": "2026-01-15T10:30:00"}, "created_at", "timezone"),
        ({"created_at": 1700000000}, "created_at", "ISO 8601"),
        ({"constraints": {"price": math.nan}}, "constraints", "JSON"),
        ({"constraints": {"when": datetime.now(UTC)}}, "constraints", "JSON"),
        ({"session_id": "x" * 201}, "session_id", "longer than"),
        # tenant: optional, an id by the job_id rules (a key of fair share and limits)
        ({"tenant": ""}, "tenant", "must not be empty"),
        ({"tenant": "t" * 201}, "tenant", "longer than 200"),
        ({"tenant": "caf\u00e9"}, "tenant", "may hold only"),
        ({"tenant": "acme corp"}, "tenant", "may hold only"),
        ({"tenant": "acme\n"}, "tenant", "may hold only"),
        ({"tenant": "{jobs}"}, "tenant", "may hold only"),
        ({"tenant": 42}, "tenant", "must be a string"),
        ({"tenant": None}, "tenant", "must be a string"),
    ],
)
def test_single_problems_name_their_field(
    change: dict[str, Any], field: str, fragment: str
) -> None:
    with pytest.raises(InvalidPayload) as caught:
        prepare_job(make_job(**change), agent_types=DEFAULT_AGENT_TYPES)
    assert list(caught.value.errors) == [field]
    assert fragment in caught.value.errors[field]
    assert caught.value.field == field


@pytest.mark.parametrize("tenant", ["acme", "t" * 200, "org:7@eu-west.a_b-c"])
def test_a_tenant_is_optional_kept_and_read_back(tenant: str) -> None:
    job = make_job(tenant=tenant)
    payload = JobPayload.from_json(prepare_job(job).encoded)
    assert payload.tenant == tenant and payload.to_dict()["tenant"] == tenant
    assert JobPayload.from_json(prepare_job(make_job()).encoded).tenant is None
    assert "tenant" not in JobPayload.from_dict(make_job()).to_dict()  # stored as it was


def test_a_payload_that_contains_itself_is_refused_naming_the_field() -> None:
    loop: dict[str, Any] = {}
    loop["again"] = loop
    with pytest.raises(InvalidPayload) as caught:
        prepare_job(make_job(constraints=loop), agent_types=DEFAULT_AGENT_TYPES)
    assert caught.value.errors == {"constraints": "must hold only JSON values"}


def test_str_enum_members_count_as_strings_and_are_stored_as_their_value() -> None:
    class Venue(StrEnum):
        DEN = "den"

    job = make_job(curated_shortlist=["jiro", Venue.DEN], constraints={Venue.DEN: 1})
    stored = json.loads(prepare_job(job, agent_types=DEFAULT_AGENT_TYPES).encoded)
    assert (stored["curated_shortlist"], stored["constraints"]) == (["jiro", "den"], {"den": 1})
    with pytest.raises(InvalidPayload) as caught:
        prepare_job(make_job(curated_shortlist=["jiro", 3], constraints={Venue.DEN: 1, 2: 0}))
    assert set(caught.value.errors) == {"curated_shortlist", "constraints"}


def test_a_bad_constraint_value_is_reported_with_the_other_bad_fields() -> None:
    job = make_job(job_id="has spaces", constraints={"nested": [{"price": math.inf}]})
    with pytest.raises(InvalidPayload) as caught:
        prepare_job(job, agent_types=DEFAULT_AGENT_TYPES)
    assert set(caught.value.errors) == {"job_id", "constraints"}
    # JSON objects have string keys: a nested int key would come back as a string.
    with pytest.raises(InvalidPayload) as caught:
        prepare_job(make_job(constraints={"by_day": {1: "mon"}}))
    assert caught.value.errors == {"constraints": "must hold only JSON values"}


plain_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)


@given(constraints=st.dictionaries(st.text(max_size=8), plain_json, max_size=4))
@settings(max_examples=300, deadline=None)
def test_stored_json_reads_back_as_the_standard_library_would_write_it(
    constraints: dict[str, Any],
) -> None:
    """The fast encoder and its standard-library fallback (big integers, StrEnum keys)
    store what json.dumps would: a consumer decoding either gets the same value."""
    job = make_job(constraints=constraints)
    stored = prepare_job(job, agent_types=DEFAULT_AGENT_TYPES).encoded
    assert json.loads(stored) == json.loads(json.dumps(job, allow_nan=False))


def test_missing_fields_are_listed_and_optional_ones_default() -> None:
    job = make_job()
    for name in ("task", "ttl_seconds", "constraints", "curated_shortlist"):
        del job[name]
    with pytest.raises(InvalidPayload) as caught:
        prepare_job(job)
    assert caught.value.errors == {"task": "missing field", "ttl_seconds": "missing field"}
    minimal = make_job()
    del minimal["constraints"], minimal["curated_shortlist"]
    payload = JobPayload.from_json(prepare_job(minimal).encoded)
    assert (payload.constraints, payload.curated_shortlist) == ({}, [])


def test_a_non_mapping_is_refused_and_a_past_deadline_is_left_to_redis() -> None:
    # Already past is judged by the enqueue script against Redis TIME
    # (tests/queue/test_enqueue_bounds.py), never by this process's clock.
    past = (datetime.now(UTC) - timedelta(minutes=5)).isoformat()
    assert prepare_job(make_job(created_at=past, ttl_seconds=60)).ttl_seconds == 60
    with pytest.raises(InvalidPayload) as caught:
        prepare_job(["not", "a", "mapping"])
    assert list(caught.value.errors) == ["payload"]


def test_size_limit_counts_encoded_utf8_bytes() -> None:
    job = make_job(task="寿司" * 400)  # 800 characters, 2400 bytes in UTF-8
    prepare_job(job, max_bytes=4000)
    with pytest.raises(InvalidPayload) as caught:
        prepare_job(job, max_bytes=2000)
    assert "over the limit of 2000" in caught.value.errors["payload"]


def test_settings_from_env_and_url() -> None:
    settings = QueueSettings.from_env(
        {
            "QUEUE_REDIS_URL": "redis://cache:6380/2",
            "QUEUE_AGENT_TYPES": "dining, flights",
            "QUEUE_MAX_ATTEMPTS": "5",
            "QUEUE_LEASE_SECONDS": "2.5",
            "QUEUE_LATENCY_BUCKETS": "0.5,1,10",
        }
    )
    assert (settings.redis.host, settings.redis.port, settings.redis.db) == ("cache", 6380, 2)
    assert settings.agent_types == ("dining", "flights")
    assert (settings.max_attempts, settings.lease_seconds) == (5, 2.5)
    assert settings.latency_buckets == (0.5, 1.0, 10.0)
    assert QueueSettings.from_url("redis://h:1/0", pool_max=7).pool_max == 7


@pytest.mark.parametrize(
    ("env", "setting"),
    [
        ({"QUEUE_LEASE_SECOND": "2"}, "QUEUE_LEASE_SECOND"),
        ({"QUEUE_MAX_ATTEMPTS": "three"}, "QUEUE_MAX_ATTEMPTS"),
        ({"QUEUE_MAX_ATTEMPTS": "0"}, "max_attempts"),
        ({"QUEUE_POOL_MIN": "30"}, "pool_min"),
        ({"QUEUE_AGENT_TYPES": "Dining!"}, "agent_types"),
        ({"QUEUE_LATENCY_BUCKETS": "5,1"}, "latency_buckets"),
        ({"QUEUE_BLOCK_TIMEOUT": "10"}, "block_timeout"),
        ({"QUEUE_BACKOFF_FACTOR": "0.5"}, "backoff_factor"),
        ({"REDIS_URL": "http://nope"}, "REDIS_URL"),
    ],
)
def test_bad_settings_fail_loudly_naming_the_setting(env: dict[str, str], setting: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        QueueSettings.from_env(env)
    assert caught.value.setting == setting


def test_public_api_is_exported() -> None:
    for name in queue_package.__all__:
        assert getattr(queue_package, name) is not None
    assert {"JobQueue", "QueueSettings", "JobPayload", "NonRetryableError"} <= set(
        queue_package.__all__
    )
    # The consumer side is a package of its own; the queue package never imports it.
    for name in worker_package.__all__:
        assert getattr(worker_package, name) is not None
    assert {"Worker", "Chores", "AttemptCalls", "Claim"} <= set(worker_package.__all__)


def test_a_ttl_beyond_ten_years_is_refused_before_anything_is_written() -> None:
    # From about 1e14 s Lua writes expires_at in exponent notation, which used to kill
    # every worker that claimed the job: the bound keeps such a job out of the queue.
    assert "ttl_seconds" not in payload_errors(make_job(ttl_seconds=MAX_TTL_SECONDS))
    for ttl in (MAX_TTL_SECONDS + 1, 10**14, 2**63 - 1):
        assert payload_errors(make_job(ttl_seconds=ttl))["ttl_seconds"] == (
            f"must be at most {MAX_TTL_SECONDS} (10 years), got {ttl}"
        )


def test_the_worker_reads_what_the_standard_library_reads_and_orjson_refuses() -> None:
    """from_json parses with orjson and falls back to json for its refusals: a job
    another producer wrote with a 100-bit integer or NaN is read, not dead-lettered."""
    stored = json.dumps(
        {"job_id": "j1", "session_id": "s", "orchestrator_id": "o", "agent_type": "dining",
         "task": "t", "constraints": {"big": 2**100, "x": float("nan")},
         "curated_shortlist": [], "result_format": "json",
         "created_at": "2026-01-01T00:00:00Z", "ttl_seconds": 60}
    )  # fmt: skip
    job = JobPayload.from_json(stored)
    assert job.constraints["big"] == 2**100 and math.isnan(job.constraints["x"])
    with pytest.raises(json.JSONDecodeError):
        JobPayload.from_json(stored[:-1])
