"""The README's metric table, rendered from the catalogue (never written by hand)."""

from __future__ import annotations

from platform_common.jobs.metric_catalogue import CATALOGUE, Metric

__all__ = ["render_metric_table"]

_HEADER = "| metric | type | labels | unit | help |\n|---|---|---|---|---|\n"


def render_metric_table() -> str:
    """A markdown table of every catalogue metric, in catalogue order, newline-terminated."""
    return _HEADER + "".join(_row(metric) for metric in CATALOGUE)


def _row(metric: Metric) -> str:
    labels = ", ".join(f"`{label}`" for label in metric.labels) or "none"
    help_text = metric.help.replace("|", "\\|")
    return f"| `{metric.name}` | {metric.type} | {labels} | {_unit(metric)} | {help_text} |\n"


def _unit(metric: Metric) -> str:
    # Prometheus' rule: the base unit is part of the name; a name without one is a count.
    if metric.name.endswith("_timestamp_seconds"):
        return "seconds (Unix time)"
    if metric.name.endswith("_seconds"):
        return "seconds"
    if metric.name.endswith("_bytes"):
        return "bytes"
    return "count"
