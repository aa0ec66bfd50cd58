"""The job payload's fields, defined once: payload.py checks them, payload_schema publishes them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ..validation import MAX_JOB_ID_LENGTH, MAX_TTL_SECONDS

__all__ = ["MAX_TEXT_LENGTH", "PAYLOAD_FIELDS", "UNEXPRESSED_RULES", "FieldSpec", "Kind"]

MAX_TEXT_LENGTH = 200
"""Longest session_id, orchestrator_id and result_format (ids, not prose)."""


class Kind(StrEnum):
    """What a field holds; payload.py has one check per kind, payload_schema.py one
    JSON Schema fragment per kind."""

    JOB_ID = "job_id"
    """A string by the job-id rules of platform_common.jobs.validation (an id-safe
    string: a job_id, and the optional tenant)."""
    TEXT = "text"
    """A string that is not empty or only whitespace, at most max_length characters."""
    AGENT_TYPE = "agent_type"
    """A string naming one of the queue's configured agent types."""
    OBJECT = "object"
    """Any JSON object."""
    STRING_LIST = "string_list"
    """A JSON array of strings."""
    TIMESTAMP = "timestamp"
    """An ISO 8601 timestamp with a timezone."""
    POSITIVE_INT = "positive_int"
    """An integer above zero (a boolean is not one), at most `maximum` when given."""


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One field of the payload: the JSON Schema's property and payload.py's check."""

    name: str
    kind: Kind
    description: str
    required: bool = True
    max_length: int | None = None
    """TEXT only: the most characters; None leaves only the payload's size limit."""
    maximum: int | None = None
    """POSITIVE_INT only: the largest value accepted."""


PAYLOAD_FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec(
        "job_id",
        Kind.JOB_ID,
        f"Unique per agent type while the job lives: 1 to {MAX_JOB_ID_LENGTH} letters, digits "
        "and . _ : @ -, starting with a letter or digit (a UUID is one).",
    ),
    FieldSpec(
        "session_id", Kind.TEXT, "The user session the job serves.", max_length=MAX_TEXT_LENGTH
    ),
    FieldSpec(
        "orchestrator_id",
        Kind.TEXT,
        'The orchestrator that sent the job, e.g. "orch-123".',
        max_length=MAX_TEXT_LENGTH,
    ),
    FieldSpec(
        "tenant",
        Kind.JOB_ID,
        "Who the job is done for, when fair share or limits per key go by tenant (see"
        ' the user guide\'s "Limits and fair share"): an id by the job_id rules, 1 to'
        f" {MAX_JOB_ID_LENGTH} letters, digits and . _ : @ -, starting with a letter or digit.",
        required=False,
    ),
    FieldSpec(
        "agent_type", Kind.AGENT_TYPE, 'Which agent\'s queue the job goes to, e.g. "dining".'
    ),
    FieldSpec("task", Kind.TEXT, "What to do, in words."),
    FieldSpec(
        "constraints",
        Kind.OBJECT,
        "Structured limits of the task (cuisines, price, ...); any JSON object.",
        required=False,
    ),
    FieldSpec(
        "curated_shortlist",
        Kind.STRING_LIST,
        "Candidates the orchestrator already chose.",
        required=False,
    ),
    FieldSpec(
        "result_format",
        Kind.TEXT,
        'The type the result must have, e.g. "RestaurantOption[]".',
        max_length=MAX_TEXT_LENGTH,
    ),
    FieldSpec(
        "created_at",
        Kind.TIMESTAMP,
        "When the orchestrator made the job, with a timezone, e.g. 2026-01-15T10:30:00Z;"
        " the TTL counts from here.",
    ),
    FieldSpec(
        "ttl_seconds",
        Kind.POSITIVE_INT,
        "Seconds after created_at when the job expires if not finished; also how long its"
        " result is kept. At most 10 years (the JobStore's bound too).",
        maximum=MAX_TTL_SECONDS,
    ),
)

UNEXPRESSED_RULES: dict[str, str] = {
    "agent-type-configured": (
        "agent_type must be one of the queue's configured agent types (QUEUE_AGENT_TYPES,"
        " a runtime setting; the defaults are the examples); payload_json_schema(agent_types)"
        " adds them as an enum."
    ),
    "max-payload-bytes": (
        "The payload's compact UTF-8 JSON encoding must fit the queue's max_payload_bytes"
        " (QUEUE_MAX_PAYLOAD_BYTES), a runtime setting."
    ),
    "not-expired": "created_at + ttl_seconds must be later than the time of enqueue by "
    "Redis' clock (the enqueue itself judges it, never the producer's clock).",
    "created-at-parser": (
        "The queue reads created_at with Python's datetime.fromisoformat: it also takes other"
        " ISO 8601 forms (2026-01-15 10:30Z, 20260115T103000Z) and refuses dates, times and"
        " offsets that do not exist (2026-02-30, +24:00, leap seconds); send RFC 3339 in the"
        " form the pattern gives."
    ),
    "integral-float-ttl": (
        "ttl_seconds must be written without a fraction: JSON Schema counts 60.0 as an"
        " integer, the queue refuses it."
    ),
}
"""Rules the queue enforces that the JSON Schema cannot express, by name: the schema's
description lists them and the equivalence test leaves out exactly these."""
