"""The pure key and cursor helpers of the time index."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from platform_common.jobs import ConfigurationError, InvalidCursor
from platform_common.jobs.keys import StoreKeys
from platform_common.jobs.store.time_index import (
    buckets_for,
    created_us,
    decode_cursor,
    encode_cursor,
    index_switches,
    job_id_of,
    list_scan_cap,
    member,
    owner_bucket,
)

job_ids = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,60}", fullmatch=True)
owners = st.just("") | job_ids
micros = st.integers(min_value=0, max_value=9_999_999_999_999_998)  # 16 digits: until 2286


@pytest.mark.parametrize(
    ("raw", "enabled"),
    [(None, False), ("", False), ("0", False), ("off", False), ("1", True), ("TRUE", True),
     ("yes", True), (" on ", True)],
)  # fmt: skip
def test_the_former_single_switch_means_both(raw: str | None, enabled: bool) -> None:
    env = {} if raw is None else {"JOBSTATE_TIME_INDEX_ENABLED": raw}
    assert index_switches(env) == (enabled, enabled)


@pytest.mark.parametrize(
    ("writes", "reads", "switches"),
    [(None, None, (False, False)), ("true", None, (True, False)), ("1", "0", (True, False)),
     ("true", "true", (True, True))],
)  # fmt: skip
def test_writes_and_reads_are_switched_apart(
    writes: str | None, reads: str | None, switches: tuple[bool, bool]
) -> None:
    env = {"JOBSTATE_TIME_INDEX_WRITES": writes, "JOBSTATE_TIME_INDEX_READS": reads}
    assert index_switches({k: v for k, v in env.items() if v is not None}) == switches


def test_reads_without_writes_are_refused() -> None:
    # An index nobody writes misses every job created from then on.
    reads_alone = {"JOBSTATE_TIME_INDEX_READS": "on"}
    for env in (reads_alone, reads_alone | {"JOBSTATE_TIME_INDEX_WRITES": "off"}):
        with pytest.raises(ConfigurationError, match="JOBSTATE_TIME_INDEX_READS: needs "):
            index_switches(env)


def test_the_former_switch_is_not_combined_with_the_two() -> None:
    env = {"JOBSTATE_TIME_INDEX_ENABLED": "true", "JOBSTATE_TIME_INDEX_READS": "false"}
    with pytest.raises(ConfigurationError, match="JOBSTATE_TIME_INDEX_ENABLED: means both"):
        index_switches(env)


@pytest.mark.parametrize(
    "name",
    ["JOBSTATE_TIME_INDEX_ENABLED", "JOBSTATE_TIME_INDEX_WRITES", "JOBSTATE_TIME_INDEX_READS"],
)
def test_a_typo_in_a_switch_is_an_error_not_off(name: str) -> None:
    with pytest.raises(ConfigurationError, match=name):
        index_switches({name: "ture"})


def test_scan_cap() -> None:
    assert list_scan_cap({}) == 5000
    assert list_scan_cap({"JOBSTATE_LIST_SCAN_CAP": "12"}) == 12
    for bad in ("0", "-3", "1e3", "many"):
        with pytest.raises(ConfigurationError, match="JOBSTATE_LIST_SCAN_CAP"):
            list_scan_cap({"JOBSTATE_LIST_SCAN_CAP": bad})


def test_buckets() -> None:
    assert owner_bucket("") == "__shared__" and owner_bucket("u1") == "u1"
    assert buckets_for("u1") == ("u1", "__shared__")
    assert buckets_for("") == ("__shared__",)


def test_index_keys_share_the_agents_slot_and_never_collide_with_records() -> None:
    keys = StoreKeys("scan-agent")
    assert keys.index("u1") == "agentjobs:{scan-agent}:_idx:u1"
    assert keys.bucket_of(keys.index("u1")) == "u1"
    assert not keys.is_record_key(keys.index("u1"))
    assert keys.is_record_key(keys.record("idx:u1"))  # a job id may look like anything valid


@given(micros, job_ids)
def test_members_sort_like_time_then_id(us: int, job_id: str) -> None:
    m = member(us, job_id)
    assert len(m.split(":", 1)[0]) == 16 and job_id_of(m) == job_id
    assert member(us, job_id) < member(us + 1, "0")


def test_created_us_is_exact_for_redis_timestamps() -> None:
    for text in ("1796013640.000001", "1796013640.999999", "1999999999.123457"):
        sec, usec = text.split(".")
        assert created_us(float(text)) == int(sec) * 1_000_000 + int(usec)


@given(owners, micros, job_ids)
def test_cursor_round_trip_is_url_safe(owner: str, us: int, job_id: str) -> None:
    cursor = encode_cursor("agent", owner, member(us, job_id))
    assert set(cursor) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    assert decode_cursor("agent", owner, cursor) == member(us, job_id)


def test_foreign_cursors_are_refused() -> None:
    cursor = encode_cursor("agent", "u1", member(5, "job"))
    with pytest.raises(InvalidCursor, match="another listing"):
        decode_cursor("agent", "u2", cursor)
    with pytest.raises(InvalidCursor, match="another listing"):
        decode_cursor("other-agent", "u1", cursor)


@pytest.mark.parametrize(
    "bad",
    ["", "!!!", "a", "A" * 401, base64.urlsafe_b64encode(b"\x02junk").decode(), "AQ"],
)
def test_malformed_cursors_are_refused(bad: str) -> None:
    with pytest.raises(InvalidCursor) as info:
        decode_cursor("agent", "u1", bad)
    assert info.value.field == "cursor"


@given(st.binary(max_size=80) | st.text(max_size=80))
def test_random_cursors_never_crash(data: bytes | str) -> None:
    text = base64.urlsafe_b64encode(data).decode() if isinstance(data, bytes) else data
    with pytest.raises(InvalidCursor):
        decode_cursor("agent", "u1", text)


def test_a_tampered_cursor_is_refused() -> None:
    raw = bytearray(base64.urlsafe_b64decode(encode_cursor("agent", "u1", member(5, "job")) + "=="))
    raw[5] = ord("9")  # another timestamp
    tampered = base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")
    with pytest.raises(InvalidCursor):
        decode_cursor("agent", "u1", tampered)
