"""The job payload's JSON Schema (draft 2020-12), generated from payload_fields and shipped."""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
from collections.abc import Collection, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from ..validation import _JOB_ID, MAX_JOB_ID_LENGTH
from .payload_fields import PAYLOAD_FIELDS, UNEXPRESSED_RULES, FieldSpec, Kind
from .queue_settings import DEFAULT_AGENT_TYPES

__all__ = ["REGENERATE", "SCHEMA_FILE", "build_schema", "payload_json_schema", "render_schema"]

SCHEMA_FILE = "job_payload.schema.json"
"""The published schema, package data next to this module."""
REGENERATE = "python -m platform_common.jobs.queue.payload_schema"
"""Writes SCHEMA_FILE from the definition; with --check, fails when it is stale."""
_PACKAGE = __name__.rpartition(".")[0]
# RFC 3339 with the timezone the queue requires, in the one form every ISO 8601 reader
# (Python's datetime.fromisoformat among them) accepts: upper-case T and Z.
_RFC3339 = (
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$"
)


def payload_json_schema(agent_types: Collection[str] | None = None) -> dict[str, Any]:
    """The published JSON Schema of a job payload (a fresh copy to change at will). With
    `agent_types` (e.g. QueueSettings.agent_types), agent_type must be one of them."""
    schema: dict[str, Any] = json.loads(_published_text())
    if agent_types is not None:
        agent_type = schema["properties"]["agent_type"]
        agent_type.pop("examples", None)
        agent_type["enum"] = sorted(agent_types)
    return schema


@functools.cache
def _published_text() -> str:
    return resources.files(_PACKAGE).joinpath(SCHEMA_FILE).read_text(encoding="utf-8")


def render_schema() -> str:
    """The text of SCHEMA_FILE as the definition gives it today."""
    return json.dumps(build_schema(), indent=2, ensure_ascii=True) + "\n"


def build_schema() -> dict[str, Any]:
    """The JSON Schema, built from payload_fields.PAYLOAD_FIELDS and the job-id rules."""
    unexpressed = " ".join(f"[{name}] {rule}" for name, rule in UNEXPRESSED_RULES.items())
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "JobPayload",
        "description": (
            "One job as an orchestrator enqueues it for an agent (platform_common.jobs.queue)."
            f" Generated from platform_common/jobs/queue/payload_fields.py by `{REGENERATE}`;"
            " do not edit. The queue also enforces these rules, which this schema cannot"
            f" express: {unexpressed}"
        ),
        "type": "object",
        "properties": {spec.name: _property(spec) for spec in PAYLOAD_FIELDS},
        "required": [spec.name for spec in PAYLOAD_FIELDS if spec.required],
        "additionalProperties": False,
    }


def _property(spec: FieldSpec) -> dict[str, Any]:
    fragment: dict[str, Any] = {"description": spec.description}
    match spec.kind:
        case Kind.JOB_ID:
            first, every = _job_id_classes()
            fragment.update(
                {
                    "$comment": "pattern: the first character; not: no character outside"
                    " the allowed ones. No $ anchor: in some regex dialects (Python's, Java's)"
                    " $ also matches before a final newline.",
                    "type": "string",
                    "maxLength": MAX_JOB_ID_LENGTH,
                    "pattern": f"^{first}",
                    "not": {"pattern": f"[^{every}]"},
                }
            )
        case Kind.TEXT:
            fragment.update(
                {
                    "$comment": "pattern: at least one character that is not whitespace"
                    " (the set of Python's str.isspace, spelled out: \\S differs by dialect).",
                    "type": "string",
                    "minLength": 1,
                    "pattern": _not_blank_pattern(),
                }
            )
            if spec.max_length is not None:
                fragment["maxLength"] = spec.max_length
        case Kind.AGENT_TYPE:
            fragment.update({"type": "string", "examples": list(DEFAULT_AGENT_TYPES)})
        case Kind.OBJECT:
            fragment["type"] = "object"
            if not spec.required:
                fragment["default"] = {}
        case Kind.STRING_LIST:
            fragment.update({"type": "array", "items": {"type": "string"}})
            if not spec.required:
                fragment["default"] = []
        case Kind.TIMESTAMP:
            fragment.update({"type": "string", "format": "date-time", "pattern": _RFC3339})
        case Kind.POSITIVE_INT:
            fragment.update({"type": "integer", "minimum": 1})
            if spec.maximum is not None:
                fragment["maximum"] = spec.maximum
    return fragment


def _job_id_classes() -> tuple[str, str]:
    """The job-id regex of platform_common.jobs.validation (the one definition, shared
    with the JobStore) as its two character classes: first character, every character."""
    shape = re.fullmatch(r"\[([^\]^]+)\]\[([^\]^]+)\]\*", _JOB_ID.pattern)
    if shape is None:
        raise RuntimeError(
            f"the job-id pattern {_JOB_ID.pattern!r} is no longer [first][every]*:"
            " teach payload_schema._job_id_classes its new shape"
        )
    return f"[{shape[1]}]", shape[2]


@functools.cache
def _not_blank_pattern() -> str:
    """A character class of one character that Python's str.isspace() refuses; a
    string matches when it is not empty and not only whitespace, as payload.py checks.
    Literal characters, not escapes: every regex dialect reads those alike."""
    blanks = [code for code in range(sys.maxunicode + 1) if chr(code).isspace()]
    runs: list[list[int]] = []
    for code in blanks:
        if runs and runs[-1][-1] == code - 1:
            runs[-1].append(code)
        else:
            runs.append([code])
    parts = [
        f"{chr(run[0])}-{chr(run[-1])}" if len(run) > 2 else "".join(map(chr, run)) for run in runs
    ]
    return "[^" + "".join(parts) + "]"


def main(argv: Sequence[str] | None = None) -> int:
    # argparse, not the CLI's typer: a core module, and the core install has no typer.
    parser = argparse.ArgumentParser(
        prog=REGENERATE, description=f"Write {SCHEMA_FILE} from payload_fields.py."
    )
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    path = Path(__file__).with_name(SCHEMA_FILE)
    text = render_schema()
    current = path.read_text(encoding="utf-8") if path.exists() else None
    if args.check:
        if current != text:
            print(f"{path} is stale: run {REGENERATE}", file=sys.stderr)
            return 1
        return 0
    if current != text:
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
