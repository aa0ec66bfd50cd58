"""Payload validation benchmark (not a test): the queue's hand-written checks vs pydantic v2.

    .venv/bin/python -m bench.payload_validation [--number 20000] [--repeat 7]

Times the checks `enqueue` runs, per payload, on the documented ~300-byte example and on a
payload with every field bad: payload.py's `payload_errors` and `prepare_job` (checks,
orjson encoding, size limit) against the same two with pydantic v2 doing every check it
can (a strict TypedDict: types, required and unknown fields, lengths, the job-id and
not-blank patterns, all in Rust). What pydantic has no constraint for stays in Python as
in payload.py: constraints' JSON values, agent-type membership (a runtime setting),
created_at read by datetime.fromisoformat (pydantic's reader takes other strings), the
expiry check and our error messages. Before timing, both sides must give the same errors
on a set of samples. Of the pydantic variants tried this one is the fastest: the agent
types as a Literal, JSON values as a recursive type, or after-validators were slower.
Best of --repeat runs of --number calls, microseconds per call; ratio = pydantic / hand
checks. pydantic comes with the http extra (FastAPI), not with the core.
"""

from __future__ import annotations

import argparse
import math
import sys
import timeit
import uuid
from collections.abc import Callable, Collection, Mapping
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, NotRequired

from pydantic import ConfigDict, Field, PlainValidator, StringConstraints, TypeAdapter, with_config
from pydantic import ValidationError as PydanticError
from pydantic_core import PydanticCustomError
from typing_extensions import TypedDict  # pydantic needs this one before Python 3.12

from platform_common.jobs.clock import now
from platform_common.jobs.errors import InvalidJobId, InvalidPayload
from platform_common.jobs.queue import DEFAULT_AGENT_TYPES
from platform_common.jobs.queue.payload import (
    MAX_TEXT_LENGTH,
    JobPayload,
    PreparedJob,
    _parse_time,
    _plain_json,
    _text_problem,
    encode_payload,
    payload_errors,
    prepare_job,
)
from platform_common.jobs.queue.payload_fields import PAYLOAD_FIELDS, Kind
from platform_common.jobs.validation import _JOB_ID, MAX_JOB_ID_LENGTH, validate_job_id

# Python's str.isspace() set as one character class: pydantic's Rust \\S differs from it.
_BLANK = "".join(chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace())
NOT_BLANK = "[^" + "".join(f"\\x{{{ord(c):x}}}" for c in _BLANK) + "]"
JOB_ID_PATTERN = f"^(?:{_JOB_ID.pattern})$"
Text = Annotated[str, StringConstraints(max_length=MAX_TEXT_LENGTH, pattern=NOT_BLANK)]
LIMITS = {s.name: s.max_length or sys.maxsize for s in PAYLOAD_FIELDS if s.kind is Kind.TEXT}


def _created_at(value: object) -> datetime:
    try:
        return _parse_time(value)
    except (TypeError, ValueError) as exc:
        # PydanticCustomError keeps our message as it is (a ValueError gets a prefix).
        raise PydanticCustomError("created_at", str(exc)) from None


@with_config(ConfigDict(extra="forbid", strict=True))
class PayloadDict(TypedDict):
    """The queue's payload rules in pydantic: what pydantic-core can check in Rust is
    declared here; constraints' JSON values, the agent type, and created_at's reading
    (datetime.fromisoformat, to accept exactly what we accept) stay in Python."""

    job_id: Annotated[str, StringConstraints(max_length=MAX_JOB_ID_LENGTH, pattern=JOB_ID_PATTERN)]
    session_id: Text
    orchestrator_id: Text
    agent_type: str
    task: Annotated[str, StringConstraints(pattern=NOT_BLANK)]
    constraints: NotRequired[dict[str, Any]]
    curated_shortlist: NotRequired[list[str]]
    result_format: Text
    created_at: Annotated[Any, PlainValidator(_created_at)]
    ttl_seconds: Annotated[int, Field(gt=0)]


ADAPTER = TypeAdapter(PayloadDict)


def _message(field: str, kind: str, value: object, fallback: str) -> str:
    """Our message for one pydantic error, so both sides report the same dict."""
    if kind == "missing":
        return "missing field"
    if kind == "extra_forbidden":
        return "unknown field"
    if field == "job_id":
        try:
            validate_job_id(value)
        except InvalidJobId as exc:
            return exc.problem
    if field in LIMITS:
        return _text_problem(value, LIMITS[field]) or fallback
    if field == "agent_type":
        return f"must be a string, got {type(value).__name__}"
    if field == "constraints":
        return "must be a JSON object (string keys)"
    if field == "curated_shortlist":
        return "must be a list of strings"
    if field == "ttl_seconds":
        shown = value if kind == "greater_than" else type(value).__name__
        return f"must be a positive int, got {shown}"
    return fallback


def pydantic_checks(
    data: object, agent_types: Collection[str] | None
) -> tuple[dict[str, str], int | None]:
    """payload.py's _validate with pydantic doing the checks it can: same errors.
    Written for speed on a valid dict (the enqueue path); refusals take _refused."""
    if type(data) is not dict:
        if not isinstance(data, Mapping):
            return {"payload": f"must be a JSON object, got {type(data).__name__}"}, None
        data = dict(data)
    try:
        valid = ADAPTER.validate_python(data)
    except PydanticError as exc:
        return _refused(data, agent_types, exc)
    errors: dict[str, str] = {}
    constraints = data.get("constraints")
    if constraints and not _plain_json(constraints):
        errors["constraints"] = "must hold only JSON values"
    if agent_types is not None and valid["agent_type"] not in agent_types:
        errors["agent_type"] = _unknown_agent_type(valid["agent_type"], agent_types)
    created_ms = int(valid["created_at"].timestamp() * 1000)
    if created_ms + valid["ttl_seconds"] * 1000 <= now() * 1000:
        errors["ttl_seconds"] = "created_at + ttl_seconds is already in the past"
    return errors, created_ms


def _unknown_agent_type(agent_type: str, agent_types: Collection[str]) -> str:
    return f"unknown agent type {agent_type!r}; known: {', '.join(sorted(agent_types))}"


def _refused(
    data: dict[str, Any], agent_types: Collection[str] | None, exc: PydanticError
) -> tuple[dict[str, str], int | None]:
    errors: dict[str, str] = {}
    for error in exc.errors():
        name = str(error["loc"][0]) if error["loc"] else "payload"
        errors.setdefault(name, _message(name, error["type"], data.get(name), error["msg"]))
    # The rules left to Python, for the fields pydantic passed: every bad field is named.
    constraints = data.get("constraints")
    if "constraints" not in errors and constraints and not _plain_json(constraints):
        errors["constraints"] = "must hold only JSON values"
    agent_type = data.get("agent_type")
    if agent_types is not None and "agent_type" not in errors and agent_type not in agent_types:
        errors["agent_type"] = _unknown_agent_type(str(agent_type), agent_types)
    if errors.keys() & {"created_at", "ttl_seconds"}:
        return errors, None
    created_ms = int(_parse_time(data["created_at"]).timestamp() * 1000)
    if created_ms + data["ttl_seconds"] * 1000 <= now() * 1000:
        errors["ttl_seconds"] = "created_at + ttl_seconds is already in the past"
    return errors, created_ms


def pydantic_prepare(
    data: object, agent_types: Collection[str] | None, max_bytes: int | None
) -> PreparedJob:
    """prepare_job, line for line, with pydantic_checks in place of the hand checks."""
    if isinstance(data, JobPayload):
        data = data.to_dict()
    errors, created_ms = pydantic_checks(data, agent_types)
    if errors:
        raise InvalidPayload(errors)
    assert created_ms is not None
    if type(data) is not dict:
        assert isinstance(data, Mapping)
    try:
        encoded = encode_payload(data)
    except (TypeError, ValueError, RecursionError):
        raise InvalidPayload({"payload": "not JSON-serialisable"}) from None
    if max_bytes is not None and len(encoded) > max_bytes:
        raise InvalidPayload(
            {"payload": f"{len(encoded)} bytes encoded, over the limit of {max_bytes}"}
        )
    return PreparedJob(data["job_id"], data["agent_type"], encoded, created_ms, data["ttl_seconds"])


def spec_example() -> dict[str, Any]:
    return {
        "job_id": str(uuid.uuid4()),
        "session_id": "5f0c6a4e-bench-session",
        "orchestrator_id": "orch-bench",
        "agent_type": "dining",
        "task": "Find 3 dinner reservations in Tokyo for Feb 13-17, party of 2",
        "constraints": {"cuisines": ["sushi", "kaiseki"], "max_price_per_person": 200},
        "curated_shortlist": ["sukiyabashi-jiro", "den", "kyubey"],
        "result_format": "RestaurantOption[]",
        "created_at": (datetime.now(UTC) + timedelta(hours=1)).isoformat(),
        "ttl_seconds": 3600,
    }


def all_bad() -> dict[str, Any]:
    return {
        "job_id": "has spaces",
        "session_id": "",
        "orchestrator_id": 7,
        "agent_type": "plumbing",
        "task": None,
        "constraints": ["not", "a", "dict"],
        "curated_shortlist": ["ok", 3],
        "result_format": "",
        "created_at": "yesterday",
        "ttl_seconds": 0,
        "colour": "blue",
    }


def samples() -> list[object]:
    """Payloads both sides must judge alike: the documented example and bad ones."""
    good = spec_example()
    changes: list[dict[str, Any]] = [
        {},
        {"ttl_seconds": -5},
        {"ttl_seconds": True},
        {"ttl_seconds": 1.5},
        {"created_at": "2026-01-15T10:30:00"},
        {"created_at": 1700000000},
        {"created_at": "2000-01-01T00:00:00Z"},
        {"constraints": {"price": math.nan}},
        {"constraints": {"nested": [{1: "one"}]}},
        {"constraints": {1: "one"}},
        {"session_id": "x" * 201},
        {"session_id": " " * 201},
        {"task": "\u2003"},
        {"job_id": "bad id", "agent_type": "plumbing"},
        {"job_id": "x" * 201, "agent_type": 3},
        {"curated_shortlist": ("a",)},
    ]
    missing = dict(good)
    del missing["task"], missing["constraints"]
    return [{**good, **change} for change in changes] + [missing, all_bad(), ["a", "list"]]


def best_us(call: Callable[[], object], number: int, repeat: int) -> float:
    return min(timeit.repeat(call, number=number, repeat=repeat)) / number * 1e6


def refusing(prepare: Callable[[Any], object]) -> Callable[[], object]:
    def call() -> object:
        try:
            return prepare(BAD)
        except InvalidPayload as exc:
            return exc

    return call


GOOD = spec_example()
BAD = all_bad()


def ours(data: Any) -> PreparedJob:
    return prepare_job(data, agent_types=DEFAULT_AGENT_TYPES, max_bytes=65536)


def theirs(data: Any) -> PreparedJob:
    return pydantic_prepare(data, DEFAULT_AGENT_TYPES, 65536)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=20000, help="calls per timing run")
    parser.add_argument("--repeat", type=int, default=7, help="timing runs; the best counts")
    args = parser.parse_args()

    # Both sides must judge every sample alike, or the numbers compare different work.
    for sample in samples():
        expected = payload_errors(sample, agent_types=DEFAULT_AGENT_TYPES)
        got = pydantic_checks(sample, DEFAULT_AGENT_TYPES)[0]
        assert got == expected, (sample, got, expected)
    assert ours(GOOD) == theirs(GOOD)

    cases: list[tuple[str, Callable[[], object], Callable[[], object]]] = [
        (
            "checks, valid payload",
            lambda: payload_errors(GOOD, agent_types=DEFAULT_AGENT_TYPES),
            lambda: pydantic_checks(GOOD, DEFAULT_AGENT_TYPES),
        ),
        ("prepare_job, valid payload", lambda: ours(GOOD), lambda: theirs(GOOD)),
        ("prepare_job, every field bad", refusing(ours), refusing(theirs)),
    ]
    print(f"microseconds per payload, best of {args.repeat} runs of {args.number} calls")
    print(f"{'case':<30}{'hand checks':>12}{'pydantic':>10}{'ratio':>8}")
    for name, hand, pyd in cases:
        hand_us = best_us(hand, args.number, args.repeat)
        pyd_us = best_us(pyd, args.number, args.repeat)
        print(f"{name:<30}{hand_us:>12.2f}{pyd_us:>10.2f}{pyd_us / hand_us:>7.2f}x")
    core_us = best_us(lambda: ADAPTER.validate_python(GOOD), args.number, args.repeat)
    print(f"(pydantic-core's own call on the valid payload, alone: {core_us:.2f})")
    print("ratio = pydantic / hand checks: above 1.00x the hand-written checks are faster")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
