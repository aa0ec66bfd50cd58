"""Offline validation of one Kubernetes object: core kinds against the Kubernetes schemas
(kubernetes-validate, strict), the operators' kinds (KEDA, Prometheus Operator) against
small schemas of our own (schemas/)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate  # type: ignore[import-untyped]

__all__ = ["KUBERNETES_VERSION", "OWN_SCHEMAS", "own_schema", "validate_object"]

# The Kubernetes minor the manifests target (kubernetes-validate ships its schemas).
KUBERNETES_VERSION = "1.30.0"
OWN_SCHEMAS = {
    "ScaledObject": "keda-scaledobject.schema.json",
    "ServiceMonitor": "servicemonitor.schema.json",
    "PrometheusRule": "prometheusrule.schema.json",
}


def own_schema(kind: str) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(
        (Path(__file__).parent / "schemas" / OWN_SCHEMAS[kind]).read_text()
    )
    return schema


def validate_object(document: dict[str, Any]) -> None:
    """Raise when `document` does not pass its kind's schema."""
    if document["kind"] in OWN_SCHEMAS:
        jsonschema.validate(document, own_schema(document["kind"]))
        return
    # strict: an unknown or misspelt field is an error, not silently dropped.
    kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)
