"""One set of input bounds for every backend (validation.py): TTL, JSON depth and size,
text that is valid Unicode. Each refusal is the same error naming the same field on
memory, Redis and Redis Cluster, and comes before anything is written."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from platform_common.jobs import InvalidTTL, JobStatus, ValidationError
from platform_common.jobs.store.contract import BaseJobStore
from platform_common.jobs.validation import (
    MAX_CLOCK_SKEW_SECONDS,
    MAX_JSON_BYTES,
    MAX_JSON_DEPTH,
    MAX_TEXT_BYTES,
    MAX_TTL_SECONDS,
    json_bounds_problem,
    text_problem,
    validate_text,
)
from tests.support.stores import Harness

pytestmark = pytest.mark.store(time_index=True)


def nested(depth: int, leaf: Any = 1) -> dict[str, Any]:
    """{"a": {"a": ... leaf}} with `depth` objects, built without recursion."""
    value: Any = leaf
    for _ in range(depth):
        value = {"a": value}
    result: dict[str, Any] = value
    return result


def shared_many_times() -> dict[str, Any]:
    """Small in memory (one list shared at every level), 10**30 leaves encoded."""
    layer: Any = ["x" * 10] * 10
    for _ in range(29):
        layer = [layer] * 10
    return {"bomb": layer}


def cyclic() -> dict[str, Any]:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    return loop


# -- TTL -----------------------------------------------------------------------------
@pytest.mark.parametrize("ttl", [MAX_TTL_SECONDS + 1, 2**31, 2**63 - 1, 2**64])
async def test_a_ttl_past_the_maximum_is_refused_before_anything_is_written(
    store: BaseJobStore, ttl: int
) -> None:
    """Defect: on Redis create wrote the record without a TTL, then raised ResponseError;
    update raised after status and version had changed."""
    with pytest.raises(InvalidTTL) as info:
        await store.create("j", ttl_seconds=ttl)
    assert info.value.field == "ttl_seconds"
    assert not await store.exists("j")
    created = await store.create("j", ttl_seconds=60)
    with pytest.raises(InvalidTTL):
        await store.update("j", status=JobStatus.RUNNING, result={"r": 1}, ttl_seconds=ttl)
    assert await store.get("j") == created


async def test_the_maximum_ttl_itself_is_accepted(harness: Harness, store: BaseJobStore) -> None:
    await store.create("j", ttl_seconds=MAX_TTL_SECONDS)
    remaining = await harness.remaining_ttl(store, "j")
    assert remaining is not None and MAX_TTL_SECONDS - 5 < remaining <= MAX_TTL_SECONDS
    await store.update("j", ttl_seconds=1)
    await store.update("j", status=JobStatus.RUNNING, ttl_seconds=MAX_TTL_SECONDS)
    remaining = await harness.remaining_ttl(store, "j")
    assert remaining is not None and MAX_TTL_SECONDS - 5 < remaining <= MAX_TTL_SECONDS


# -- created_at -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "created_at",
    [
        datetime(2999, 1, 1, tzinfo=UTC),
        datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1))),
    ],
    ids=["year-2999", "year-1-plus-one-hour"],
)
async def test_created_at_is_the_backends_clock_never_the_callers(
    harness: Harness, store: BaseJobStore, created_at: datetime
) -> None:
    """Issue 12 named a far-future created_at (a job that never expires, a record with no
    TTL) and year 1 at +01:00 with a huge TTL (OverflowError). The store takes neither:
    it stamps created_at itself (Redis TIME inside store_create.lua; the process clock
    for memory), so no caller value can reach its TTL arithmetic. A queue payload's
    created_at is the queue's to bound."""
    create: Any = store.create
    with pytest.raises(TypeError, match="created_at"):
        await create("j", ttl_seconds=MAX_TTL_SECONDS, created_at=created_at)
    assert not await store.exists("j")
    record = await store.create("j", ttl_seconds=MAX_TTL_SECONDS)
    clock = harness.clock() if harness.kind == "memory" else time.time()
    assert abs(record.created_at - clock) <= MAX_CLOCK_SKEW_SECONDS
    update: Any = store.update
    with pytest.raises(TypeError, match="created_at"):
        await update("j", created_at=created_at)
    assert await store.get("j") == record
    remaining = await harness.remaining_ttl(store, "j")
    assert remaining is not None and 0 < remaining <= MAX_TTL_SECONDS


# -- JSON depth and size -----------------------------------------------------------------
async def test_payload_and_result_may_nest_up_to_the_maximum_depth(store: BaseJobStore) -> None:
    deepest = nested(MAX_JSON_DEPTH)
    assert (await store.create("j", deepest, ttl_seconds=60)).payload == deepest
    done = await store.update("j", result=nested(MAX_JSON_DEPTH, "r"))
    assert done.result == nested(MAX_JSON_DEPTH, "r")
    assert await store.get("j") == done


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 100_000])
@pytest.mark.parametrize("field", ["payload", "result"])
async def test_deeper_json_is_refused_by_name_without_recursing(
    store: BaseJobStore, depth: int, field: str
) -> None:
    """Defect: a 100k-deep payload raised RecursionError in create (both backends)."""
    too_deep = nested(depth)
    if field == "payload":
        with pytest.raises(ValidationError, match=f"nested deeper than {MAX_JSON_DEPTH}") as info:
            await store.create("j", too_deep, ttl_seconds=60)
        assert info.value.field == "payload"
        assert not await store.exists("j")
    created = await store.create("k", {"a": 1}, ttl_seconds=60)
    bad: dict[str, Any] = {field: too_deep}
    with pytest.raises(ValidationError) as info:
        await store.update("k", status=JobStatus.RUNNING, **bad)
    assert info.value.field == field
    assert await store.get("k") == created


async def test_json_up_to_the_size_bound_is_accepted_and_one_byte_more_refused(
    store: BaseJobStore,
) -> None:
    overhead = len('{"s":""}')
    exact = {"s": "x" * (MAX_JSON_BYTES - overhead)}
    assert (await store.create("j", exact, ttl_seconds=60)).payload == exact
    over = {"s": "x" * (MAX_JSON_BYTES - overhead + 1)}
    with pytest.raises(ValidationError, match=f"larger than {MAX_JSON_BYTES}") as info:
        await store.create("k", over, ttl_seconds=60)
    assert info.value.field == "payload"
    with pytest.raises(ValidationError) as info:
        await store.update("j", result=over)
    assert info.value.field == "result"
    assert (await store.get("j")).version == 1  # type: ignore[union-attr]
    assert not await store.exists("k")


async def test_the_size_bound_is_on_the_stored_encoding(store: BaseJobStore) -> None:
    """Stored JSON is ASCII: "é" takes six bytes (\\u00e9), so this fits in memory as
    a sixth of the bound yet is refused."""
    with pytest.raises(ValidationError, match="larger than") as info:
        await store.create("j", {"s": "é" * (MAX_JSON_BYTES // 6 + 1)}, ttl_seconds=60)
    assert info.value.field == "payload"


@pytest.mark.parametrize(
    ("value", "problem"),
    [(shared_many_times(), "larger than"), (cyclic(), "nested deeper than")],
    ids=["shared-list-bomb", "cycle"],
)
async def test_self_referencing_json_is_refused_quickly(
    store: BaseJobStore, value: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ValidationError, match=problem) as info:
        await store.create("j", value, ttl_seconds=60)
    assert info.value.field == "payload"
    assert not await store.exists("j")


# -- text ----------------------------------------------------------------------------------
LONE_SURROGATE = "x\udcff"  # what bytes decoded with errors="surrogateescape" look like


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"error": LONE_SURROGATE}, "error"),
        ({"payload": {"s": LONE_SURROGATE}}, "payload"),
        ({"payload": {LONE_SURROGATE: 1}}, "payload"),
        ({"result": {"list": ["ok", {"deep": LONE_SURROGATE}]}}, "result"),
        ({"result": {"pair": "\ud83d\ude00"}}, "result"),  # a pair as two code points
    ],
    ids=["error", "payload-value", "payload-key", "result-nested", "result-split-pair"],
)
async def test_text_that_is_not_valid_unicode_is_refused_on_every_backend(
    store: BaseJobStore, kwargs: dict[str, Any], field: str
) -> None:
    """Defect: update(error="x\\udcff") raised UnicodeEncodeError on Redis and was
    stored by the memory backend. Refused on both (not escaped): no reader could turn
    it back into text, and the caller learns which field at the door."""
    created = await store.create("j", {"a": 1}, ttl_seconds=60)
    with pytest.raises(ValidationError) as info:
        await store.update("j", status=JobStatus.RUNNING, **kwargs)
    assert info.value.field == field
    assert "surrogate" in info.value.problem
    assert await store.get("j") == created
    if field == "payload":
        with pytest.raises(ValidationError) as info:
            await store.create("k", kwargs["payload"], ttl_seconds=60)
        assert info.value.field == "payload"
        assert not await store.exists("k")


async def test_any_valid_unicode_round_trips(store: BaseJobStore) -> None:
    text = "naïve café, 東京, emoji 😀, RTL ‏שלום, NUL \x00 and newline \n"
    created = await store.create("j", {text: [text, {"k": text}]}, ttl_seconds=60)
    assert created.payload == {text: [text, {"k": text}]}
    updated = await store.update("j", result={"r": text}, error=text)
    assert (updated.result, updated.error) == ({"r": text}, text)
    assert await store.get("j") == updated


async def test_error_text_is_bounded_in_utf8_bytes(store: BaseJobStore) -> None:
    await store.create("j", ttl_seconds=60)
    fits = "é" * (MAX_TEXT_BYTES // 2)  # two bytes each: exactly the bound
    assert (await store.update("j", error=fits)).error == fits
    with pytest.raises(ValidationError, match=f"longer than {MAX_TEXT_BYTES}") as info:
        await store.update("j", error=fits + "x")
    assert info.value.field == "error"
    assert (await store.get("j")).version == 2  # type: ignore[union-attr]


# -- the checks themselves (shared with the queue) --------------------------------------
def test_json_bounds_problem_names_where() -> None:
    assert json_bounds_problem({"a": [1, {"b": "ok"}]}) is None
    problem = json_bounds_problem({"a": [1, {"b": LONE_SURROGATE}]})
    assert problem is not None and "$['a'][1]['b']" in problem
    problem = json_bounds_problem(nested(3), max_depth=2)
    assert problem == "nested deeper than 2 levels at $['a']['a']"
    assert json_bounds_problem(nested(2), max_depth=2) is None
    assert json_bounds_problem([], max_bytes=2) is None
    assert json_bounds_problem(["x"], max_bytes=4) == "larger than 4 bytes encoded"
    assert json_bounds_problem(5) is None and json_bounds_problem("x") is None


def test_text_checks() -> None:
    assert text_problem("plain") is None and text_problem("é😀") is None
    assert "surrogate" in (text_problem("a\ud800") or "")
    assert validate_text("é" * 2, "f", max_bytes=4) == "éé"
    with pytest.raises(ValidationError, match="longer than 3 bytes"):
        validate_text("éé", "f", max_bytes=3)
    with pytest.raises(ValidationError, match="must be a string"):
        validate_text(b"bytes", "f")
