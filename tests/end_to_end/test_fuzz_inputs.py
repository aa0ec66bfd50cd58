"""Hypothesis over every door bad data comes through: queue payloads (validated, then
enqueued against a real Redis), JobStore records (as dicts, and as hashes found in
Redis), and stored results. Every bad input gets the library's own error, never a
crash, and writes nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from platform_common.jobs import JobRecord, JobsError, make_job_store
from platform_common.jobs.errors import InvalidPayload, InvalidRecord, ValidationError
from platform_common.jobs.queue import JobQueue, QueueSettings
from platform_common.jobs.queue.payload import FIELDS, prepare_job
from platform_common.jobs.queue.results import parse_result
from tests.support.redis_server import RedisServer

AGENT_TYPES = ("dining", "flights")
REDIS_EXAMPLES = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


def valid_job(job_id: str = "fuzz-1") -> dict[str, Any]:
    return {
        "job_id": job_id,
        "session_id": "s-1",
        "orchestrator_id": "orch-1",
        "agent_type": "dining",
        "task": "find a table",
        "constraints": {"party": 2},
        "curated_shortlist": ["a", "b"],
        "result_format": "RestaurantOption[]",
        "created_at": (datetime.now(UTC) + timedelta(seconds=5)).isoformat(),
        "ttl_seconds": 300,
    }


@st.composite
def mutated_jobs(draw: st.DrawFn) -> Any:
    """A valid job with some fields dropped, replaced by junk, or joined by unknown ones;
    or no mapping at all."""
    if draw(st.integers(0, 9)) == 0:
        return draw(json_values)
    job: dict[str, Any] = valid_job(draw(st.text(min_size=1, max_size=12)))
    for name in draw(st.lists(st.sampled_from(FIELDS), max_size=4, unique=True)):
        if draw(st.booleans()):
            job.pop(name, None)  # (an optional field, tenant, may be absent already)
        else:
            job[name] = draw(json_values)
    for name in draw(st.lists(st.text(max_size=8), max_size=2)):
        job[name] = draw(json_values)
    return job


@given(mutated_jobs())
@settings(max_examples=300, deadline=None)
def test_payload_validation_answers_with_its_own_error(job: Any) -> None:
    try:
        prepared = prepare_job(job, agent_types=AGENT_TYPES, max_bytes=4096)
    except InvalidPayload as exc:
        assert exc.errors, "an InvalidPayload must name what is wrong"
        assert all(isinstance(name, str) and problem for name, problem in exc.errors.items())
    else:
        assert prepared.agent_type in AGENT_TYPES and prepared.job_id == job["job_id"]


@given(st.dictionaries(st.sampled_from([*JobRecord.__dataclass_fields__, "x"]), json_values))
@settings(max_examples=300, deadline=None)
def test_record_parsing_answers_with_its_own_error(data: dict[str, Any]) -> None:
    try:
        record = JobRecord.from_dict(data)
    except InvalidRecord as exc:
        assert exc.field
    else:
        assert JobRecord.from_dict(record.to_dict()) == record


@given(st.text(max_size=60) | json_values.map(str))
@settings(max_examples=200, deadline=None)
def test_stored_result_parsing_answers_with_its_own_error(text: str) -> None:
    try:
        result = parse_result("dining", "job-1", text)
    except InvalidRecord:
        pass
    else:
        assert result.status in ("succeeded", "failed", "expired")


# -- against a real Redis: refused input writes nothing -----------------------------------
@pytest.fixture(scope="module")
def fuzz_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture(scope="module")
def runner() -> Iterator[asyncio.Runner]:
    # One event loop for all examples: the clients below live in it.
    with asyncio.Runner() as loop_runner:
        yield loop_runner


@pytest.fixture(scope="module")
def queue(fuzz_server: RedisServer, runner: asyncio.Runner) -> Iterator[JobQueue]:
    settings_ = QueueSettings.from_url(
        fuzz_server.url, agent_types=AGENT_TYPES, max_payload_bytes=4096, pool_min=1
    )
    job_queue = runner.run(JobQueue.connect(settings_))
    yield job_queue
    runner.run(job_queue.aclose())


@pytest.fixture(scope="module")
def raw(fuzz_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis(port=fuzz_server.port, decode_responses=True)
    yield client
    client.close()


@given(job=mutated_jobs())
@REDIS_EXAMPLES
def test_a_refused_enqueue_writes_nothing(
    job: Any, queue: JobQueue, runner: asyncio.Runner, raw: redis.Redis
) -> None:
    raw.flushall()
    try:
        runner.run(queue.enqueue(job))
    except InvalidPayload:
        assert raw.dbsize() == 0, raw.keys("*")
    else:
        assert raw.llen(f"jobs:{{{job['agent_type']}}}:queue") == 1


@given(
    fields=st.dictionaries(
        st.sampled_from(["status", "payload", "result", "error", "version", "created_at",
                         "updated_at", "owner_oid", "junk"]),
        st.text(max_size=12) | st.integers().map(str) | json_values.map(str),
        min_size=1,
    )
)  # fmt: skip
@REDIS_EXAMPLES
def test_a_malformed_hash_in_redis_is_reported_and_never_half_changed(
    fields: dict[str, str], fuzz_server: RedisServer, runner: asyncio.Runner, raw: redis.Redis
) -> None:
    raw.flushall()
    store = make_job_store(fuzz_server.url, agent="fuzz-agent")
    key = store.keys.record("job-1")  # type: ignore[attr-defined]
    raw.hset(key, mapping=fields)
    raw.expire(key, 300)
    before = raw.hgetall(key)

    async def read_then_update() -> None:
        try:
            record = await store.get("job-1")
            if record is not None:
                await store.update("job-1", error="checked")
        except (ValidationError, JobsError) as exc:
            assert isinstance(exc, JobsError)  # the library's own error
            assert raw.hgetall(key) == before, "a refused update changed the hash"
        finally:
            await store.close()

    runner.run(read_then_update())
