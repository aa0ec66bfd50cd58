"""The job payload of the queue spec, validated: every bad field is reported at once."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple

import orjson

from ..errors import InvalidJobId, InvalidPayload
from ..keys import FAIR_BY_KEYS
from ..validation import MAX_TTL_SECONDS, validate_job_id
from .payload_fields import MAX_TEXT_LENGTH, PAYLOAD_FIELDS, Kind

__all__ = [
    "FIELDS",
    "MAX_TEXT_LENGTH",
    "JobPayload",
    "PreparedJob",
    "encode_payload",
    "payload_errors",
    "prepare_job",
]

FIELDS: tuple[str, ...] = tuple(spec.name for spec in PAYLOAD_FIELDS)
_FIELD_SET = frozenset(FIELDS)
# constraints and curated_shortlist may be left out (no constraints, no shortlist);
# every other field of the documented example is required.
_OPTIONAL = frozenset(spec.name for spec in PAYLOAD_FIELDS if not spec.required)
_REQUIRED = _FIELD_SET - _OPTIONAL
_TEXT_FIELDS = tuple(
    (spec.name, sys.maxsize if spec.max_length is None else spec.max_length)
    for spec in PAYLOAD_FIELDS
    if spec.kind is Kind.TEXT
)
# _validate checks the other kinds field by field (one pass, no dispatch: this runs
# for every job), so a change of the table it does not follow must fail here, loudly.
_CHECKED_BY_NAME = {
    "job_id": Kind.JOB_ID,
    "tenant": Kind.JOB_ID,
    "agent_type": Kind.AGENT_TYPE,
    "constraints": Kind.OBJECT,
    "curated_shortlist": Kind.STRING_LIST,
    "created_at": Kind.TIMESTAMP,
    "ttl_seconds": Kind.POSITIVE_INT,
}
if {s.name: s.kind for s in PAYLOAD_FIELDS if s.kind is not Kind.TEXT} != _CHECKED_BY_NAME:
    raise RuntimeError("payload_fields.PAYLOAD_FIELDS changed: update payload._validate")
# The standard library's encoder, for the corners orjson refuses (see encode_payload).
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
_STR_TYPE = frozenset({str})
_NO_CONSTRAINTS: dict[str, Any] = {}
_NO_SHORTLIST: list[str] = []
_ABSENT = object()


@dataclass(frozen=True, slots=True)
class JobPayload:
    """One job as the orchestrator sends it to an agent worker (job_payload.schema.json).
    Each field means what its entry in payload_fields.PAYLOAD_FIELDS says."""

    job_id: str
    session_id: str
    orchestrator_id: str
    agent_type: str
    task: str
    constraints: dict[str, Any] = field(default_factory=dict)
    curated_shortlist: list[str] = field(default_factory=list)
    result_format: str = ""
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    """Timezone-aware."""
    ttl_seconds: int = 60
    tenant: str | None = None
    """None when the payload has none."""

    @classmethod
    def from_dict(
        cls,
        data: Mapping[str, Any],
        *,
        agent_types: Collection[str] | None = None,
        max_bytes: int | None = None,
    ) -> JobPayload:
        """Validate `data` and build the payload; InvalidPayload lists every bad field."""
        prepare_job(data, agent_types=agent_types, max_bytes=max_bytes)
        return cls._trusted(data)

    @classmethod
    def from_json(cls, text: str | bytes) -> JobPayload:
        """Rebuild a payload the producer validated and stored (the worker's side)."""
        try:
            data = orjson.loads(text)  # about a third of json.loads' time per job
        except orjson.JSONDecodeError:
            # What orjson refuses and the standard library reads (integers past 64 bits,
            # NaN, escaped lone surrogates, from another producer) is still read; what
            # neither reads raises json's own error.
            data = json.loads(text)
        return cls._trusted(data)

    @classmethod
    def _trusted(cls, data: Mapping[str, Any]) -> JobPayload:
        return cls(
            job_id=data["job_id"],
            session_id=data["session_id"],
            orchestrator_id=data["orchestrator_id"],
            agent_type=data["agent_type"],
            task=data["task"],
            constraints=dict(data.get("constraints") or {}),
            curated_shortlist=list(data.get("curated_shortlist") or []),
            result_format=data["result_format"],
            created_at=_parse_time(data["created_at"]),
            ttl_seconds=data["ttl_seconds"],
            tenant=data.get("tenant"),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of job_payload.schema.json; created_at as ISO 8601 in UTC with a "Z"."""
        data: dict[str, Any] = {
            "job_id": self.job_id,
            "session_id": self.session_id,
            "orchestrator_id": self.orchestrator_id,
            "agent_type": self.agent_type,
            "task": self.task,
            "constraints": self.constraints,
            "curated_shortlist": self.curated_shortlist,
            "result_format": self.result_format,
            "created_at": format_time(self.created_at),
            "ttl_seconds": self.ttl_seconds,
        }
        if self.tenant is not None:  # optional: a payload without one stays as it was
            data["tenant"] = self.tenant
        return data

    @property
    def created_at_ms(self) -> int:
        return int(self.created_at.timestamp() * 1000)


def payload_errors(data: object, *, agent_types: Collection[str] | None = None) -> dict[str, str]:
    """Every problem of a payload mapping, field -> problem ({} when it is valid)."""
    return _validate(data, agent_types)[0]


def _validate(
    data: object, agent_types: Collection[str] | None
) -> tuple[dict[str, str], int | None]:
    # An exact dict first: the ABC's isinstance costs 0.1 us, a field's check's worth.
    if type(data) is not dict and not isinstance(data, Mapping):
        return {"payload": f"must be a JSON object, got {type(data).__name__}"}, None
    errors: dict[str, str] = {}
    if not _FIELD_SET.issuperset(data):
        for name in data:
            if name not in _FIELD_SET:
                errors[str(name)] = "unknown field"
    if not _REQUIRED.issubset(data):
        for name in FIELDS:
            if name not in data and name not in _OPTIONAL:
                errors[name] = "missing field"
    if "job_id" in data:
        try:
            validate_job_id(data["job_id"])
        except InvalidJobId as exc:
            errors["job_id"] = exc.problem
    if "tenant" in data:
        try:
            validate_job_id(data["tenant"])
        except InvalidJobId as exc:
            errors["tenant"] = exc.problem
    for name, limit in _TEXT_FIELDS:
        value = data.get(name, _ABSENT)
        if value is _ABSENT:
            continue
        # The common case inline (this runs for every job); _text_problem says why not.
        if type(value) is str and value and len(value) <= limit and not value.isspace():
            continue
        problem = _text_problem(value, limit)
        if problem:
            errors[name] = problem
    if "agent_type" in data:
        agent_type = data["agent_type"]
        if not isinstance(agent_type, str):
            errors["agent_type"] = f"must be a string, got {type(agent_type).__name__}"
        elif agent_types is not None and agent_type not in agent_types:
            errors["agent_type"] = (
                f"unknown agent type {agent_type!r}; known: {', '.join(sorted(agent_types))}"
            )
    constraints = data.get("constraints", _NO_CONSTRAINTS)
    if type(constraints) is dict and _plain_json(constraints):
        pass  # the usual case: one pass checks its keys and its values
    elif not isinstance(constraints, dict) or not _all_strings(constraints):
        errors["constraints"] = "must be a JSON object (string keys)"
    elif constraints and not _plain_json(constraints):
        errors["constraints"] = "must hold only JSON values"
    shortlist = data.get("curated_shortlist", _NO_SHORTLIST)
    if not isinstance(shortlist, list) or not _all_strings(shortlist):
        errors["curated_shortlist"] = "must be a list of strings"
    created_ms: int | None = None
    if "created_at" in data:
        try:
            created_ms = int(_parse_time(data["created_at"]).timestamp() * 1000)
        except (TypeError, ValueError) as exc:
            errors["created_at"] = str(exc)
    if "ttl_seconds" in data:
        ttl = data["ttl_seconds"]
        if isinstance(ttl, bool) or not isinstance(ttl, int):
            errors["ttl_seconds"] = f"must be a positive int, got {type(ttl).__name__}"
        elif ttl <= 0:
            errors["ttl_seconds"] = f"must be a positive int, got {ttl}"
        elif ttl > MAX_TTL_SECONDS:
            # A bigger TTL would be written as a float in exponent notation and poison
            # every worker that claims the job (issue: the ttl poison pill).
            errors["ttl_seconds"] = f"must be at most {MAX_TTL_SECONDS} (10 years), got {ttl}"
    # Whether created_at + ttl_seconds is already past is the enqueue script's to judge,
    # by Redis TIME as the worker does: this process's clock may be minutes off.
    return errors, created_ms


class PreparedJob(NamedTuple):
    """A validated payload, encoded once, with what the enqueue script needs.

    A NamedTuple, not a frozen dataclass: one is built per job enqueued, and a frozen
    dataclass's __init__ (an object.__setattr__ per field) cost three times as much."""

    job_id: str
    agent_type: str
    encoded: bytes
    """The payload's JSON in UTF-8, as stored."""
    created_at_ms: int
    ttl_seconds: int
    fairness: str = ""
    """The job's fairness values as the enqueue script reads them (fairness_values), or
    "" when it has none of the fields."""


def fairness_values(data: Mapping[str, Any]) -> str:
    """What the enqueue script reads of a valid payload's fairness fields: each field's
    value as "<length in UTF-8 bytes>:<value>" ("0:" when absent), or "" when none is set."""
    # (keys.py FAIR_BY_KEYS: the order the enqueue script reads them in)
    values = [data.get(name) for name in FAIR_BY_KEYS]
    if not any(values):
        return ""
    parts = []
    for value in values:
        text = value if isinstance(value, str) else ""
        parts.append(f"{len(text.encode())}:{text}")
    return "".join(parts)


def prepare_job(
    data: object,
    *,
    agent_types: Collection[str] | None = None,
    max_bytes: int | None = None,
) -> PreparedJob:
    """Validate and encode one payload (a mapping or a JobPayload); InvalidPayload lists
    every bad field, including a payload over `max_bytes` once encoded."""
    if isinstance(data, JobPayload):
        data = data.to_dict()
    errors, created_ms = _validate(data, agent_types)
    if errors:
        raise InvalidPayload(errors)
    assert created_ms is not None
    if type(data) is not dict:
        assert isinstance(data, Mapping)  # _validate refused anything else
    try:
        encoded = encode_payload(data)
    except (TypeError, ValueError, RecursionError):
        # Every field was checked above; only an exotic Mapping type gets here.
        raise InvalidPayload({"payload": "not JSON-serialisable"}) from None
    if max_bytes is not None and len(encoded) > max_bytes:
        raise InvalidPayload(
            {"payload": f"{len(encoded)} bytes encoded, over the limit of {max_bytes}"}
        )
    return PreparedJob(
        data["job_id"], data["agent_type"], encoded, created_ms, data["ttl_seconds"],
        fairness_values(data),
    )  # fmt: skip


def encode_payload(data: Mapping[str, Any]) -> bytes:
    """The stored JSON (UTF-8) of a valid payload mapping: compact, created_at
    normalised to ISO 8601 in UTC."""
    body = data
    if (
        isinstance(data.get("created_at"), datetime)
        or "constraints" not in data
        or "curated_shortlist" not in data
    ):
        body = dict(data)
        created = body.get("created_at")
        if isinstance(created, datetime):
            body["created_at"] = format_time(created)
        body.setdefault("constraints", {})
        body.setdefault("curated_shortlist", [])
    try:
        # orjson takes a tenth of the standard library's time. Validation has made
        # sure the body is plain JSON, so orjson's extras (datetimes, dataclasses,
        # NaN written as null) never come into play.
        return orjson.dumps(body)
    except orjson.JSONEncodeError:
        # orjson refuses two corners JSON allows: str-subclass keys (a StrEnum
        # member) and integers beyond 64 bits. The standard library decides there.
        return _ENCODER.encode(body).encode()


def format_time(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _parse_time(value: object) -> datetime:
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"not an ISO 8601 timestamp: {value[:40]!r}") from None
    else:
        raise TypeError(f"must be an ISO 8601 string, got {type(value).__name__}")
    if moment.tzinfo is None:
        raise ValueError("must carry a timezone (e.g. 2026-01-15T10:30:00Z)")
    return moment


def _all_strings(items: Iterable[object]) -> bool:
    # Exact types first: set(map(type, ...)) costs a fraction of a generator of
    # isinstance calls; str subclasses (a StrEnum member) take the slower check.
    return _STR_TYPE.issuperset(map(type, items)) or all(isinstance(i, str) for i in items)


def _text_problem(value: object, limit: int) -> str | None:
    if not isinstance(value, str):
        return f"must be a string, got {type(value).__name__}"
    if not value.strip():
        return "must not be empty"
    if len(value) > limit:
        return f"longer than {limit} characters"
    return None


def _plain_json(value: object) -> bool:
    """True when `value` holds only what JSON carries as it is: objects with string
    keys, arrays, strings, integers, finite floats, booleans and null. A value that
    contains itself is not plain JSON."""
    try:
        return _plain(value)
    except RecursionError:
        return False


def _plain(value: object) -> bool:
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(isinstance(key, str) and _plain(item) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return all(_plain(item) for item in value)
    # Subclasses of str and int (StrEnum, IntEnum members) are stored as their value.
    return isinstance(value, (str, int))
