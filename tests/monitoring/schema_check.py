"""Our JSON Schemas (tests/monitoring/schemas/) as validators that list every problem."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema

__all__ = ["SCHEMAS", "errors", "schema"]

SCHEMAS = Path(__file__).resolve().parent / "schemas"


def schema(name: str, definition: str | None = None) -> dict[str, Any]:
    """Schema file `name` (e.g. "dashboard"), or one of its `$defs` as a schema of its own."""
    document: dict[str, Any] = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    if definition is None:
        return document
    return {"$ref": f"#/$defs/{definition}", "$defs": document["$defs"]}


def errors(instance: Any, against: dict[str, Any]) -> list[str]:
    """Every violation as 'path: message' (empty when `instance` is valid)."""
    validator = jsonschema.Draft202012Validator(against)
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(instance)]
