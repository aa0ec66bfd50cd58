"""The JobStore contract, written once and run on every backend: memory, a Redis server
and a Redis Cluster (tests/store/conftest.py)."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

from platform_common.jobs import (
    IllegalTransition,
    InvalidJobId,
    InvalidTTL,
    JobConflict,
    JobNotFound,
    JobRecord,
    JobStatus,
    JobStore,
    ValidationError,
    VersionConflict,
)
from platform_common.jobs.status import TERMINAL
from platform_common.jobs.store.contract import BaseJobStore
from tests.support.stores import Harness

BAD_JOB_IDS = ["", "a b", "line\nbreak", "x" * 201, "{tag}", "star*", "-leading", 5, None]
BAD_TTLS = [0, -1, True, 1.5, None, "10"]


pytestmark = pytest.mark.valkey  # the contract, on the second server family too


# -- create / get ---------------------------------------------------------------
async def test_create_then_get_returns_the_same_record(store: BaseJobStore) -> None:
    created = await store.create("job-1", {"request": {"target": "x"}}, ttl_seconds=60)
    assert created.status is JobStatus.PENDING
    assert created.payload == {"request": {"target": "x"}}
    assert (created.result, created.error, created.version, created.owner_oid) == (
        None,
        None,
        1,
        "",
    )
    assert created.created_at == created.updated_at > 0
    assert await store.get("job-1") == created


async def test_store_satisfies_the_protocol(store: BaseJobStore) -> None:
    assert isinstance(store, JobStore)


async def test_create_with_status_owner_and_no_payload(store: BaseJobStore) -> None:
    record = await store.create("j", ttl_seconds=5, status=JobStatus.RUNNING, owner_oid="user-7")
    assert (record.payload, record.status, record.owner_oid) == (None, JobStatus.RUNNING, "user-7")
    assert await store.get("j") == record


async def test_status_may_be_given_as_its_string(store: BaseJobStore) -> None:
    record = await store.create("j", ttl_seconds=5, status="running")  # type: ignore[arg-type]
    assert record.status is JobStatus.RUNNING
    with pytest.raises(ValidationError) as info:
        await store.create("k", ttl_seconds=5, status="done")  # type: ignore[arg-type]
    assert info.value.field == "status"
    assert await store.get("k") is None


async def test_create_of_an_existing_id_conflicts_and_changes_nothing(store: BaseJobStore) -> None:
    first = await store.create("dup", {"n": 1}, ttl_seconds=60)
    with pytest.raises(JobConflict) as info:
        await store.create("dup", {"n": 2}, ttl_seconds=60)
    assert info.value.job_id == "dup"
    assert await store.get("dup") == first


@pytest.mark.parametrize("ttl", BAD_TTLS)
async def test_ttl_must_be_a_positive_int(store: BaseJobStore, ttl: Any) -> None:
    with pytest.raises(InvalidTTL) as info:
        await store.create("j", ttl_seconds=ttl)
    assert info.value.field == "ttl_seconds"
    assert await store.get("j") is None
    await store.create("j", ttl_seconds=5)
    with pytest.raises(InvalidTTL):
        await store.update("j", ttl_seconds=ttl if ttl is not None else 0)
    assert (await store.get("j")).version == 1  # type: ignore[union-attr]


async def test_ttl_is_a_required_keyword(store: BaseJobStore) -> None:
    with pytest.raises(TypeError):
        await store.create("j", {"a": 1})  # type: ignore[call-arg]


@pytest.mark.parametrize("job_id", BAD_JOB_IDS)
async def test_bad_job_ids_are_refused_by_every_verb(store: BaseJobStore, job_id: Any) -> None:
    with pytest.raises(InvalidJobId):
        await store.create(job_id, ttl_seconds=5)
    for call in (store.get, store.delete, store.exists):
        with pytest.raises(InvalidJobId):
            await call(job_id)
    with pytest.raises(InvalidJobId):
        await store.update(job_id, status=JobStatus.RUNNING)
    assert await store.list_ids() == []


@pytest.mark.parametrize(
    ("payload", "problem"),
    [([1, 2], "must be a dict"), ({"x": object()}, "JSON"), ({"x": math.nan}, "JSON")],
)
async def test_payload_must_be_a_json_object(
    store: BaseJobStore, payload: Any, problem: str
) -> None:
    with pytest.raises(ValidationError, match=problem) as info:
        await store.create("j", payload, ttl_seconds=5)
    assert info.value.field == "payload"
    assert await store.get("j") is None


@pytest.mark.parametrize(
    ("value", "where"),
    [
        ({1: "a", "1": "b"}, "int key 1 at $"),
        ({True: "x"}, "bool key True at $"),
        ({"a": [{"b": {None: 1}}]}, "NoneType key None at $['a'][0]['b']"),
        ({"f": {1.5: 0}}, "float key 1.5 at $['f']"),
    ],
    ids=["int-beside-its-string", "bool", "nested-none", "float"],
)
async def test_non_string_keys_are_refused_at_any_depth(
    store: BaseJobStore, value: dict[Any, Any], where: str
) -> None:
    """Defect: {1: 'a', '1': 'b'} was stored as {'1': 'b'} ('a' lost) and {True: 'x'} as
    {'true': 'x'}. Refused as the queue refuses such constraints, naming where."""
    problem = f"must be a JSON object (string keys): {where}"
    with pytest.raises(ValidationError) as info:
        await store.create("j", value, ttl_seconds=60)
    assert (info.value.field, info.value.problem) == ("payload", problem)
    assert await store.get("j") is None
    created = await store.create("j", {"ok": 1}, ttl_seconds=60)
    with pytest.raises(ValidationError) as info:
        await store.update("j", payload=value)
    assert (info.value.field, info.value.problem) == ("payload", problem)
    with pytest.raises(ValidationError) as info:
        await store.update("j", result=value)
    assert (info.value.field, info.value.problem) == ("result", problem)
    assert await store.get("j") == created


async def test_payload_comes_back_as_json_would(store: BaseJobStore) -> None:
    await store.create("j", {"tuple": (1, 2), "nested": {"u": "é"}}, ttl_seconds=5)
    assert (await store.get("j")).payload == {"tuple": [1, 2], "nested": {"u": "é"}}  # type: ignore[union-attr]


async def test_get_of_a_missing_job_is_none(store: BaseJobStore) -> None:
    assert await store.get("nope") is None
    assert await store.exists("nope") is False


# -- update -------------------------------------------------------------------------
async def test_update_of_a_missing_job_raises_not_found(store: BaseJobStore) -> None:
    with pytest.raises(JobNotFound) as info:
        await store.update("ghost", status=JobStatus.RUNNING)
    assert info.value.job_id == "ghost"
    assert await store.get("ghost") is None


async def test_update_changes_only_what_is_given_and_bumps_the_version(
    harness: Harness, store: BaseJobStore
) -> None:
    created = await store.create("j", {"p": 1}, ttl_seconds=60)
    await harness.pass_time(0.01)
    running = await store.update("j", status=JobStatus.RUNNING)
    assert (running.status, running.payload, running.version) == (JobStatus.RUNNING, {"p": 1}, 2)
    assert running.created_at == created.created_at
    assert running.updated_at > created.updated_at
    done = await store.update("j", status=JobStatus.SUCCEEDED, result={"r": [1]})
    assert (done.status, done.result, done.error, done.version) == (
        JobStatus.SUCCEEDED,
        {"r": [1]},
        None,
        3,
    )
    touched = await store.update("j", payload={"p": 2}, error="")
    assert (touched.payload, touched.result, touched.error, touched.version) == (
        {"p": 2},
        {"r": [1]},
        "",
        4,
    )
    assert await store.get("j") == touched


async def test_update_validates_its_arguments(store: BaseJobStore) -> None:
    await store.create("j", ttl_seconds=60)
    bad: list[dict[str, Any]] = [
        {"result": [1]},
        {"payload": "text"},
        {"error": 5},
        {"expected_version": 0},
        {"expected_version": True},
        {"status": "finished"},
    ]
    for kwargs in bad:
        with pytest.raises(ValidationError):
            await store.update("j", **kwargs)
    assert (await store.get("j")).version == 1  # type: ignore[union-attr]


async def test_expected_version_is_compare_and_set(store: BaseJobStore) -> None:
    await store.create("j", ttl_seconds=60)
    record = await store.update("j", status=JobStatus.RUNNING, expected_version=1)
    assert record.version == 2
    with pytest.raises(VersionConflict) as info:
        await store.update("j", status=JobStatus.CANCELLED, expected_version=1)
    assert (info.value.expected, info.value.actual) == (1, 2)
    assert await store.get("j") == record


async def test_concurrent_updates_with_expected_version_let_exactly_one_win(
    store: BaseJobStore,
) -> None:
    await store.create("race", ttl_seconds=60)
    outcomes = await asyncio.gather(
        *(store.update("race", result={"by": n}, expected_version=1) for n in range(20)),
        return_exceptions=True,
    )
    winners = [o for o in outcomes if isinstance(o, JobRecord)]
    assert len(winners) == 1
    assert all(isinstance(o, VersionConflict) for o in outcomes if o not in winners)
    assert await store.get("race") == winners[0]


async def test_concurrent_updates_without_expected_version_all_land(store: BaseJobStore) -> None:
    """Redis validates the record it read and writes only to that version, retrying a
    lost race: every writer still gets through, each on its own version."""
    await store.create("busy", ttl_seconds=60)
    records = await asyncio.gather(*(store.update("busy", result={"by": n}) for n in range(20)))
    assert sorted(r.version for r in records) == list(range(2, 22))
    final = await store.get("busy")
    assert final is not None and final.version == 21
    assert final == next(r for r in records if r.version == 21)


@pytest.mark.parametrize("terminal", sorted(TERMINAL))
async def test_terminal_states_never_change_status(
    store: BaseJobStore, terminal: JobStatus
) -> None:
    await store.create("j", ttl_seconds=60)
    final = await store.update("j", status=terminal)
    for other in JobStatus:
        if other == terminal:
            continue
        with pytest.raises(IllegalTransition) as info:
            await store.update("j", status=other)
        assert (info.value.current, info.value.requested) == (terminal.value, other.value)
    assert await store.get("j") == final  # nothing written
    again = await store.update("j", status=terminal, result={"note": "same outcome again"})
    assert again.version == final.version + 1


async def test_active_states_move_freely(store: BaseJobStore) -> None:
    await store.create("j", ttl_seconds=60, status=JobStatus.RUNNING)
    assert (await store.update("j", status=JobStatus.PENDING)).status is JobStatus.PENDING
    assert (await store.update("j", status=JobStatus.RUNNING)).status is JobStatus.RUNNING
    assert (await store.update("j", status=JobStatus.FAILED, error="boom")).error == "boom"


# -- TTL ------------------------------------------------------------------------------
async def test_records_expire_after_their_ttl(harness: Harness, store: BaseJobStore) -> None:
    await store.create("short", ttl_seconds=1)
    await store.create("long", ttl_seconds=60)
    await harness.pass_time(0.5)
    assert await store.exists("short")
    await harness.pass_time(0.55)
    took = await harness.wait_gone(store, "short", deadline_s=2.0)
    assert took < 2.0
    assert await store.get("short") is None
    assert not await store.exists("short")
    assert await store.list_ids() == ["long"]
    with pytest.raises(JobNotFound):
        await store.update("short", status=JobStatus.RUNNING)
    await store.create("short", ttl_seconds=5)  # the id is free again


async def test_update_keeps_the_remaining_ttl(harness: Harness, store: BaseJobStore) -> None:
    await store.create("j", ttl_seconds=100)
    await harness.pass_time(0.3)
    await store.update("j", status=JobStatus.RUNNING)
    remaining = await harness.remaining_ttl(store, "j")
    assert remaining is not None and 98 < remaining <= 99.75


async def test_update_with_ttl_resets_it(harness: Harness, store: BaseJobStore) -> None:
    await store.create("j", ttl_seconds=100)
    await store.update("j", status=JobStatus.RUNNING, ttl_seconds=500)
    remaining = await harness.remaining_ttl(store, "j")
    assert remaining is not None and 499 < remaining <= 500
    await store.update("j", ttl_seconds=10)
    remaining = await harness.remaining_ttl(store, "j")
    assert remaining is not None and 9 < remaining <= 10


async def test_preserved_ttl_really_expires(harness: Harness, store: BaseJobStore) -> None:
    await store.create("j", ttl_seconds=1)
    await store.update("j", status=JobStatus.RUNNING)  # no ttl: the 1 s keeps running
    await harness.pass_time(1.05)
    await harness.wait_gone(store, "j", deadline_s=2.0)
    assert await store.get("j") is None


# -- delete / exists / list_ids -----------------------------------------------------
async def test_delete(store: BaseJobStore) -> None:
    await store.create("j", {"a": 1}, ttl_seconds=60)
    assert await store.exists("j")
    assert await store.delete("j") is True
    assert await store.delete("j") is False
    assert await store.get("j") is None
    assert not await store.exists("j")
    assert (await store.create("j", ttl_seconds=60)).version == 1


async def test_list_ids_is_bounded_by_limit(store: BaseJobStore) -> None:
    ids = {f"job-{n}" for n in range(25)}
    for job_id in ids:
        await store.create(job_id, ttl_seconds=60)
    assert set(await store.list_ids()) == ids
    some = await store.list_ids(limit=10)
    assert len(some) == 10 and set(some) <= ids
    bad_limits: list[Any] = [0, -1, True, 10_001, 2.5]
    for bad in bad_limits:
        with pytest.raises(ValidationError):
            await store.list_ids(limit=bad)


async def test_ping_and_close(store: BaseJobStore) -> None:
    assert await store.ping() is True
    await store.create("j", ttl_seconds=60)
    await store.close()
    await store.close()  # idempotent
