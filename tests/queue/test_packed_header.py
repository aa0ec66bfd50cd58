"""A waiting job's packed value is read by one Lua function (lua/include/packed_header.lua:
the claim, both expiry scripts and the enqueue's replay check) and one Python function
(queue/envelope.py, unpack_queued), with one verdict: a value one reads the other reads
alike, field by field, and a value one refuses the other refuses. (The Lua function
leaves the numbers' length to each script, which bounds what it computes with or
writes; Python refuses more than 15 digits outright.)"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from platform_common.jobs.queue.envelope import unpack_queued
from platform_common.jobs.redis.script import lua_source
from tests.support.redis_server import RedisServer

READ = """
local job, enq = unpack_packed(ARGV[1])
if not job then
    return {'refused', enq or false}
end
return {'read', job[1], job[2], job[3], job[4], job[5], job[6], job[7],
    job.ordered and 'o' or '', job.level or ''}
"""


@pytest.fixture(scope="module")
def sync_client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis(port=redis_server.port, decode_responses=True)
    try:
        yield client
    finally:
        client.close()


def lua_verdict(client: redis.Redis, value: str) -> list[Any]:
    source = lua_source("include/packed_header") + READ
    return cast(list[Any], client.eval(source, 0, value))


def python_verdict(value: str) -> list[Any]:
    try:
        job = unpack_queued(value)
    except ValueError:
        return ["refused"]
    return [
        "read", job.enqueued_at_ms, job.expires_at_ms, job.ttl_seconds, job.max_attempts,
        job.nonce, job.trace_context or "", job.payload, "o" if job.ordered else "",
        {"high": "h", "low": "l"}.get(job.priority, ""),
    ]  # fmt: skip


def agree(client: redis.Redis, value: str) -> None:
    lua = lua_verdict(client, value)
    python = python_verdict(value)
    if lua[0] == "read":
        numbers = lua[1:5]
        if any(len(text) > 15 for text in numbers):
            assert python == ["refused"]  # the scripts bound these themselves
            return
        lua[1:5] = [int(text) for text in numbers]
        assert lua == python
    else:
        assert python == ["refused"]
        # What still reads of a refused value: the enqueued_at before the first comma.
        head = value.split(",", 1)[0]
        expected = head if "," in value and head.isascii() and head.isdigit() else None
        assert lua[1] == expected


CASES = {
    "as enqueue writes it": "1700000000000,1700000060000,60,3,ab:1\n\n{}",
    "in deadline order": "1,2,3,4,n,o\n\n{}",
    "of priority high": "1,2,3,4,n,h\n\n{}",
    "of priority low": "1,2,3,4,n,l\n\n{}",
    "an unknown level": "1,2,3,4,n,x\n\n{}",
    "a level after the order mark": "1,2,3,4,n,o,h\n\n{}",
    "with a trace context": '1,2,3,4,n\n{"traceparent":"00-x"}\n{"a":1}',
    "a payload with newlines and commas": "1,2,3,4,n\n\nx,\n,y\n",
    "an empty nonce": "1,2,3,4,\n\n",
    "15 digits": "1,999999999999999,3,4,n\n\n{}",
    "16 digits": "1,9999999999999999,3,4,n\n\n{}",
    "leading zeros": "01,002,060,03,n\n\n{}",
    "another marker": "1,2,3,4,n,x\n\n{}",
    "two markers": "1,2,3,4,n,o,o\n\n{}",
    "a field missing": "1,2,3,n\n\n{}",
    "a number that is none": "1,soon,3,4,n\n\n{}",
    "an empty number": "1,,3,4,n\n\n{}",
    "a sign": "1,-2,3,4,n\n\n{}",
    "one line break": "1,2,3,4,n\n{}",
    "no line break": "1,2,3,4,n",
    "no header": "\n\n{}",
    "Unicode digits": "1,\u0662,3,4,n\n\n{}",
    "nothing": "",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_lua_and_python_read_a_packed_value_alike(sync_client: redis.Redis, case: str) -> None:
    agree(sync_client, CASES[case])


PIECES = ["1", "0", "60", "007", "9" * 16, "", "x", "-1", ",", "\n", "o", ",o", "n:1", " "]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(PIECES), max_size=14).map("".join))
def test_generated_values_get_one_verdict(sync_client: redis.Redis, value: str) -> None:
    agree(sync_client, value)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.sampled_from(["1", "22", "0"]), min_size=4, max_size=4),
    st.sampled_from(["", ",o", ",x", ",o,o", "o"]),
    st.text(alphabet="ab:,1", max_size=4),
    st.text(alphabet='{}"a,\n ', max_size=6),
    st.text(max_size=8),
)
def test_generated_headers_get_one_verdict(
    sync_client: redis.Redis,
    numbers: list[str],
    marker: str,
    nonce: str,
    trace: str,
    payload: str,
) -> None:
    agree(sync_client, ",".join([*numbers, nonce]) + marker + "\n" + trace + "\n" + payload)
