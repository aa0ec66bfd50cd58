"""JobRecord: to_dict/from_dict round-trip, and every bad dict refused with our own error."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from platform_common.jobs.errors import InvalidRecord, JobsError
from platform_common.jobs.status import JobStatus
from platform_common.jobs.store.record import JobRecord

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=8,
)
json_dicts = st.dictionaries(st.text(max_size=8), json_values, max_size=4)
finite = st.floats(allow_nan=False, allow_infinity=False, min_value=0, max_value=4e9)

records = st.builds(
    JobRecord,
    job_id=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,30}", fullmatch=True),
    status=st.sampled_from(list(JobStatus)),
    payload=st.none() | json_dicts,
    result=st.none() | json_dicts,
    error=st.none() | st.text(max_size=30),
    created_at=finite,
    updated_at=finite,
    version=st.integers(min_value=1, max_value=10**6),
    owner_oid=st.text(alphabet="abc123", max_size=5),
)


@given(records)
def test_round_trip(record: JobRecord) -> None:
    assert JobRecord.from_dict(record.to_dict()) == record


@given(st.dictionaries(st.text(max_size=12), json_values | finite, max_size=10) | json_values)
def test_random_input_is_refused_with_our_error(data: Any) -> None:
    try:
        record = JobRecord.from_dict(data)
    except JobsError as exc:
        assert isinstance(exc, InvalidRecord)
    else:  # only a fully valid dict may get through, and then it round-trips
        assert JobRecord.from_dict(record.to_dict()) == record


@given(records, st.sampled_from(["job_id", "status", "payload", "version", "created_at"]),
       json_values)  # fmt: skip
def test_mistyped_field_is_named(record: JobRecord, name: str, value: Any) -> None:
    data = record.to_dict()
    data[name] = value
    try:
        JobRecord.from_dict(data)
    except InvalidRecord as exc:
        assert exc.field == name


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d.pop("status"), "status"),
        (lambda d: d.update(extra=1), "extra"),
        (lambda d: d.update(status="done"), "status"),
        (lambda d: d.update(version=0), "version"),
        (lambda d: d.update(version=True), "version"),
        (lambda d: d.update(created_at=float("nan")), "created_at"),
        (lambda d: d.update(payload=[1]), "payload"),
    ],
)
def test_specific_bad_fields(mutate: Any, field: str) -> None:
    data = JobRecord("j1", JobStatus.PENDING, created_at=1.0, updated_at=1.0).to_dict()
    mutate(data)
    with pytest.raises(InvalidRecord) as info:
        JobRecord.from_dict(data)
    assert info.value.field == field
