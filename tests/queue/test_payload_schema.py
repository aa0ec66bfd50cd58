"""The published payload JSON Schema: current, valid 2020-12, and judging as the queue does."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable, Collection
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]  # no stubs among the dev tools
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from platform_common.jobs.errors import InvalidPayload
from platform_common.jobs.queue import DEFAULT_AGENT_TYPES
from platform_common.jobs.queue import payload_schema as schema_module
from platform_common.jobs.queue.payload import prepare_job
from platform_common.jobs.queue.payload_fields import (
    MAX_TEXT_LENGTH,
    PAYLOAD_FIELDS,
    UNEXPRESSED_RULES,
    FieldSpec,
    Kind,
)
from platform_common.jobs.queue.payload_schema import (
    REGENERATE,
    SCHEMA_FILE,
    payload_json_schema,
    render_schema,
)
from platform_common.jobs.validation import _JOB_ID, MAX_JOB_ID_LENGTH
from tests.support.paths import REPO_ROOT

AgentTypes = tuple[str, ...] | None
SCHEMA_PATH = Path(schema_module.__file__).with_name(SCHEMA_FILE)

# The rules of UNEXPRESSED_RULES the equivalence tests stay clear of, by name (each
# generator below says where). "agent-type-configured" is not among them: the tests
# pass the agent types to payload_json_schema, which adds them as an enum.
EXCLUDED = {"max-payload-bytes", "not-expired", "created-at-parser", "integral-float-ttl"}
# Values only Python can hold (NaN, tuples, datetimes, int keys, StrEnum members) are
# outside the schema's domain, JSON text: tests/queue/test_payload.py covers what the queue
# does with them. Every value generated here is what json.loads could return.


def test_the_committed_schema_file_is_generated_from_the_definition() -> None:
    assert SCHEMA_PATH.read_text(encoding="utf-8") == render_schema(), (
        f"{SCHEMA_PATH.name} is stale: run `.venv/bin/{REGENERATE}` and commit it"
    )
    assert schema_module.main(["--check"]) == 0
    assert payload_json_schema() == json.loads(render_schema())


def test_the_stale_check_fails_when_the_definition_moved(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schema_module, "render_schema", lambda: render_schema() + " ")
    assert schema_module.main(["--check"]) == 1


def test_the_schema_file_ships_as_package_data() -> None:
    with (REPO_ROOT / "pyproject.toml").open("rb") as file:
        package_data = tomllib.load(file)["tool"]["setuptools"]["package-data"]
    assert SCHEMA_FILE in package_data[schema_module.__name__.rpartition(".")[0]]


def test_the_schema_is_draft_2020_12_and_documents_what_it_cannot_express() -> None:
    schema = payload_json_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    for name in UNEXPRESSED_RULES:
        assert f"[{name}]" in schema["description"]
    assert UNEXPRESSED_RULES.keys() >= EXCLUDED
    assert list(schema["properties"]) == [spec.name for spec in PAYLOAD_FIELDS]


def test_the_job_id_description_states_the_rule_the_queue_applies() -> None:
    # Any id-safe string is a job id, a UUID or not: the words must not say "a UUID".
    description = payload_json_schema()["properties"]["job_id"]["description"]
    assert _JOB_ID.fullmatch("order:42@eu-1.retry_2")
    assert "(a UUID)" not in description
    assert f"1 to {MAX_JOB_ID_LENGTH} letters, digits and . _ : @ -" in description
    assert _JOB_ID.pattern == "[A-Za-z0-9][A-Za-z0-9._:@-]*"  # what the words say


def test_agent_types_narrow_a_fresh_copy() -> None:
    narrowed = payload_json_schema(["flights", "dining"])
    assert narrowed["properties"]["agent_type"]["enum"] == ["dining", "flights"]
    narrowed["properties"].clear()
    assert "enum" not in payload_json_schema()["properties"]["agent_type"]


@cache
def _schema_validator(agent_types: AgentTypes) -> jsonschema.Validator:
    return jsonschema.Draft202012Validator(
        payload_json_schema(agent_types),
        format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER,
    )


def queue_accepts(
    payload: object, agent_types: Collection[str] | None, max_bytes: int | None = None
) -> bool:
    try:
        # No max_bytes by default: [max-payload-bytes] is a runtime setting the schema
        # cannot hold.
        prepare_job(payload, agent_types=agent_types, max_bytes=max_bytes)
    except InvalidPayload:
        return False
    return True


def schema_accepts(payload: object, agent_types: AgentTypes) -> bool:
    return bool(_schema_validator(agent_types).is_valid(payload))


# --- generators -----------------------------------------------------------------------

AGENT_TYPE_SETS = st.sampled_from([None, DEFAULT_AGENT_TYPES])
BLANKS = st.text(
    alphabet=st.characters(categories=["Zs", "Zl", "Zp", "Cc"]).filter(str.isspace), max_size=4
)
JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10)
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
JSON_OBJECTS = st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=4)


def _text(limit: int | None) -> st.SearchStrategy[str]:
    some = st.text(min_size=1, max_size=40)
    if limit is not None:  # the bound itself, too, not only the short strings text() favours
        some |= st.text(min_size=limit - 3, max_size=limit)
    return some.filter(lambda value: not value.isspace())


# [not-expired]: created_at from 2030 on, so no ttl_seconds makes a job already expired.
# [created-at-parser]: only the RFC 3339 form the schema's pattern gives, which
# datetime.fromisoformat reads too; never its other ISO 8601 forms or impossible dates.
TIMESTAMPS = st.builds(
    lambda moment, fraction, offset: f"{moment:%Y-%m-%dT%H:%M:%S}{fraction}{offset}",
    st.datetimes(min_value=datetime(2030, 1, 1)),
    st.sampled_from(["", ".5", ".123", ".123456", ".123456789"]),
    st.sampled_from(["Z", "+00:00", "-00:00", "+09:00", "-05:30", "+23:59", "-23:59"]),
)


def _valid_value(spec: FieldSpec, agent_types: AgentTypes) -> st.SearchStrategy[Any]:
    match spec.kind:
        case Kind.JOB_ID:
            return st.from_regex(_JOB_ID, fullmatch=True).filter(
                lambda job_id: len(job_id) <= MAX_JOB_ID_LENGTH
            )
        case Kind.TEXT:
            return _text(spec.max_length)
        case Kind.AGENT_TYPE:
            return st.text(max_size=12) if agent_types is None else st.sampled_from(agent_types)
        case Kind.OBJECT:
            return JSON_OBJECTS
        case Kind.STRING_LIST:
            return st.lists(st.text(max_size=10), max_size=4)
        case Kind.TIMESTAMP:
            return TIMESTAMPS
        case Kind.POSITIVE_INT:
            return st.integers(min_value=1, max_value=spec.maximum or 2**70)
    raise AssertionError(spec.kind)


_JSON_BY_TYPE: dict[type, st.SearchStrategy[Any]] = {
    type(None): st.none(),
    bool: st.booleans(),
    int: st.integers(min_value=-(2**70), max_value=2**70),
    float: st.floats(allow_nan=False, allow_infinity=False),
    str: st.text(max_size=10),
    list: st.lists(JSON_SCALARS, max_size=2),
    dict: JSON_OBJECTS,
}


def _not_of_type(*kinds: type) -> st.SearchStrategy[Any]:
    """A JSON value of none of `kinds`, each other type as likely (bool is not int)."""
    return st.one_of([values for kind, values in _JSON_BY_TYPE.items() if kind not in kinds])


# A way to make one field bad: a strategy of bad values, given the agent types.
Family = Callable[[AgentTypes], st.SearchStrategy[Any]]


def _invalid_families(spec: FieldSpec) -> dict[str, Family]:
    """Every way the tests make `spec`'s field bad, by name: values the queue refuses
    whatever the other fields hold."""
    not_a_string: Family = lambda _: _not_of_type(str)  # noqa: E731
    match spec.kind:
        case Kind.JOB_ID:
            valid = _valid_value(spec, None)
            outside = st.characters().filter(lambda char: not _JOB_ID.fullmatch("a" + char))
            long = f"[A-Za-z0-9._:@-]{{{MAX_JOB_ID_LENGTH + 1},{MAX_JOB_ID_LENGTH + 5}}}"
            return {
                "not a string": not_a_string,
                "empty": lambda _: st.just(""),
                "too long": lambda _: st.from_regex(long, fullmatch=True),
                "bad first": lambda _: st.builds(str.__add__, st.sampled_from("._:@-"), valid),
                "bad character": lambda _: st.builds(
                    lambda a, bad, b: a + bad + b, valid, outside, st.text(max_size=3)
                ),
                # Where a pattern ending in $ lets it through in Python (and Java).
                "final newline": lambda _: valid.map(lambda job_id: job_id + "\n"),
            }
        case Kind.TEXT:
            families = {"not a string": not_a_string, "blank": lambda _: BLANKS}
            if spec.max_length is not None:
                limit = spec.max_length
                families["too long"] = lambda _: st.text(min_size=limit + 1, max_size=limit + 5)
            return families
        case Kind.AGENT_TYPE:
            return {
                "not a string": not_a_string,
                # Only with agent types: without them the queue takes any string.
                "unknown": lambda agent_types: st.text(max_size=12).filter(
                    lambda name: name not in (agent_types or DEFAULT_AGENT_TYPES)
                ),
            }
        case Kind.OBJECT:
            return {"not an object": lambda _: _not_of_type(dict)}
        case Kind.STRING_LIST:
            return {
                "not an array": lambda _: _not_of_type(list),
                "a non-string item": lambda _: st.builds(
                    lambda items, bad, at: [*items[:at], bad, *items[at:]],
                    st.lists(st.text(max_size=5), max_size=3),
                    _not_of_type(str),
                    st.integers(min_value=0, max_value=3),
                ),
            }
        case Kind.TIMESTAMP:
            return {
                "not a string": not_a_string,
                "naive": lambda _: TIMESTAMPS.map(lambda stamp: stamp[:19]),
                "a date alone": lambda _: TIMESTAMPS.map(lambda stamp: stamp[:10]),
                # Lower-case z (fromisoformat takes any separator, so t alone would pass).
                "lower case": lambda _: TIMESTAMPS.filter(lambda t: t.endswith("Z")).map(str.lower),
                "no digits": lambda _: st.text(
                    alphabet=st.characters(exclude_categories=["Nd"]), max_size=20
                ),
            }
        case Kind.POSITIVE_INT:
            # [integral-float-ttl]: floats with a fraction only, never 60.0.
            fraction = st.floats(min_value=-1e9, max_value=1e9).filter(lambda x: not x.is_integer())
            return {
                "not a number": lambda _: _not_of_type(int, float),
                "zero or less": lambda _: st.integers(max_value=0),
                "above the maximum": lambda _: st.integers(
                    min_value=(spec.maximum or 2**70) + 1, max_value=2**70
                ),
                "a fraction": lambda _: fraction,
                "a boolean": lambda _: st.booleans(),
            }
    raise AssertionError(spec.kind)


@st.composite
def valid_payloads(draw: st.DrawFn, agent_types: AgentTypes) -> dict[str, Any]:
    payload = {}
    for spec in PAYLOAD_FIELDS:
        if spec.required or draw(st.booleans()):
            payload[spec.name] = draw(_valid_value(spec, agent_types))
    return payload


BY_NAME = {spec.name: spec for spec in PAYLOAD_FIELDS}
REQUIRED = [spec.name for spec in PAYLOAD_FIELDS if spec.required]


@st.composite
def invalid_payloads(draw: st.DrawFn, agent_types: AgentTypes) -> object:
    """A valid payload with one to three things wrong with it, or no object at all."""
    if draw(st.integers(min_value=0, max_value=19)) == 0:
        return draw(_not_of_type(dict))
    payload: dict[str, Any] = draw(valid_payloads(agent_types))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        change = draw(st.sampled_from(["bad value", "missing", "unknown field"]))
        if change == "unknown field":
            name = draw(st.text(max_size=12).filter(lambda key: key not in BY_NAME))
            payload[name] = draw(JSON_VALUES)
        elif change == "missing":
            payload.pop(draw(st.sampled_from(REQUIRED)), None)
        else:
            spec = draw(st.sampled_from(PAYLOAD_FIELDS))
            families = _invalid_families(spec)
            if agent_types is None:
                families.pop("unknown", None)  # without agent types, any string is one
            family = draw(st.sampled_from(list(families.values())))
            payload[spec.name] = draw(family(agent_types))
    return payload


@st.composite
def with_agent_types(draw: st.DrawFn, payloads: Any) -> tuple[object, AgentTypes]:
    agent_types = draw(AGENT_TYPE_SETS)
    return draw(payloads(agent_types)), agent_types


# --- equivalence ------------------------------------------------------------------------


@given(case=with_agent_types(valid_payloads))
@settings(max_examples=400, deadline=None)
def test_every_payload_the_queue_accepts_passes_the_schema(
    case: tuple[dict[str, Any], AgentTypes],
) -> None:
    payload, agent_types = case
    assert queue_accepts(payload, agent_types)
    assert schema_accepts(payload, agent_types)


BAD_VALUES = [
    pytest.param(spec, family, id=f"{spec.name}-{name}")
    for spec in PAYLOAD_FIELDS
    for name, family in _invalid_families(spec).items()
]


@pytest.mark.parametrize(("spec", "family"), BAD_VALUES)
@given(data=st.data())
@settings(max_examples=40, deadline=None)
def test_a_payload_with_one_bad_field_fails_both(
    spec: FieldSpec, family: Family, data: st.DataObject
) -> None:
    """One bad field at a time, each way of each field for itself: a second bad field
    would hide a rule the schema lacks for the first."""
    agent_types = data.draw(AGENT_TYPE_SETS, label="agent_types")
    if spec.kind is Kind.AGENT_TYPE:
        agent_types = DEFAULT_AGENT_TYPES  # without agent types, any string is one
    payload = data.draw(valid_payloads(agent_types), label="payload")
    payload[spec.name] = data.draw(family(agent_types), label=spec.name)
    assert not queue_accepts(payload, agent_types)
    assert not schema_accepts(payload, agent_types)


@given(data=st.data())
@settings(max_examples=200, deadline=None)
def test_a_missing_field_an_unknown_one_or_no_object_fails_both(data: st.DataObject) -> None:
    agent_types = data.draw(AGENT_TYPE_SETS, label="agent_types")
    payload: object = data.draw(valid_payloads(agent_types), label="payload")
    assert isinstance(payload, dict)
    match data.draw(st.sampled_from(["missing", "unknown", "no object"]), label="change"):
        case "missing":
            del payload[data.draw(st.sampled_from(REQUIRED), label="field")]
        case "unknown":
            unknown = data.draw(st.text(max_size=12).filter(lambda key: key not in BY_NAME))
            payload[unknown] = data.draw(JSON_VALUES, label="value")
        case _:
            payload = data.draw(_not_of_type(dict), label="payload")
    assert not queue_accepts(payload, agent_types)
    assert not schema_accepts(payload, agent_types)


@given(case=with_agent_types(invalid_payloads))
@settings(max_examples=300, deadline=None)
def test_every_payload_the_queue_refuses_fails_the_schema(
    case: tuple[object, AgentTypes],
) -> None:
    payload, agent_types = case
    assert not queue_accepts(payload, agent_types)
    assert not schema_accepts(payload, agent_types)


@pytest.mark.parametrize(
    ("change", "agent_types"),
    [
        ({"ttl_seconds": True}, None),
        ({"ttl_seconds": 0}, None),
        ({"ttl_seconds": 2.5}, None),
        ({"job_id": "job-1\n"}, None),
        ({"job_id": "-job"}, None),
        ({"job_id": "j" * (MAX_JOB_ID_LENGTH + 1)}, None),
        ({"session_id": "\u2003\x1c"}, None),
        ({"result_format": "x" * (MAX_TEXT_LENGTH + 1)}, None),
        ({"agent_type": "plumbing"}, DEFAULT_AGENT_TYPES),
        ({"created_at": "2030-01-15T10:30:00"}, None),
        ({"curated_shortlist": ["den", 3]}, None),
        ({"constraints": ["not", "an", "object"]}, None),
        ({"colour": "blue"}, None),
    ],
)
def test_named_corners_are_refused_by_both(change: dict[str, Any], agent_types: AgentTypes) -> None:
    payload = {
        "job_id": "6c3f2a8e-1d4b-4f7a-9c2e-5b8d0e1f2a3b",
        "session_id": "0b7e6f4a-session",
        "orchestrator_id": "orch-123",
        "agent_type": "dining",
        "task": "Find 3 dinner reservations in Tokyo",
        "result_format": "RestaurantOption[]",
        "created_at": "2099-01-15T10:30:00Z",
        "ttl_seconds": 60,
    }
    assert queue_accepts(payload, agent_types) and schema_accepts(payload, agent_types)
    payload.update(change)
    assert not queue_accepts(payload, agent_types)
    assert not schema_accepts(payload, agent_types)


@pytest.mark.parametrize(
    ("rule", "change"),
    [
        ("created-at-parser", {"created_at": "2099-01-15 10:30Z"}),
        ("created-at-parser", {"created_at": "2099-02-30T10:30:00Z"}),
        ("integral-float-ttl", {"ttl_seconds": 60.0}),
        ("max-payload-bytes", {"task": "x" * 65536}),
    ],
)
# ("not-expired" has no case here: the enqueue judges it by Redis' clock, not the payload
# check; tests/queue/test_enqueue_bounds.py shows the refusal.)
def test_the_excluded_rules_are_real_differences(rule: str, change: dict[str, Any]) -> None:
    """Each exclusion is a case where the two disagree, so it is excluded for a reason
    (and this fails once the schema learns to express the rule)."""
    payload = {
        "job_id": "job-1",
        "session_id": "s",
        "orchestrator_id": "o",
        "agent_type": "dining",
        "task": "t",
        "result_format": "r",
        "created_at": "2099-01-15T10:30:00Z",
        "ttl_seconds": 60,
        **change,
    }
    assert rule in EXCLUDED
    assert queue_accepts(payload, None, max_bytes=65536) != schema_accepts(payload, None)
