"""grafanalib dashboard -> the JSON Grafana stores today (no legacy keys, no unset fields).

grafanalib 0.7.1 writes every attribute, including pre-v8 keys that Grafana migrates on
load (`rows`, `style`, panel `span`/`height`, template `useTags`, ...) and `null` for
unset ones, which Grafana's own strict schemas reject.
"""

from __future__ import annotations

import json
from typing import Any

from grafanalib._gen import DashboardEncoder

__all__ = ["dashboard_json", "render"]

# Pre-v8 / Angular-era keys that carry no meaning for modern panels.
_LEGACY_DASHBOARD = {"__inputs", "hideControls", "rows", "sharedCrosshair", "style"}
_LEGACY_PANEL = {"editable", "error", "height", "minSpan", "span", "repeatDirection", "maxPerRow"}
_LEGACY_VARIABLE = {"tagValuesQuery", "tags", "tagsQuery", "useTags"}
_LEGACY_TIMEPICKER = {"time_options"}


def _drop_unset(value: Any) -> Any:
    """Remove `None` fields, except a threshold step's `value` (null = from -infinity)."""
    if isinstance(value, dict):
        return {
            key: _drop_unset(item)
            for key, item in value.items()
            if item is not None or key == "value"
        }
    if isinstance(value, list):
        return [_drop_unset(item) for item in value]
    return value


def _clean_panel(panel: dict[str, Any]) -> dict[str, Any]:
    panel = {key: item for key, item in panel.items() if key not in _LEGACY_PANEL}
    if panel.get("repeat") is None:
        panel.pop("repeat", None)
    if panel.get("type") == "row":
        # A row keeps only the row model's fields.
        keep = {"collapsed", "datasource", "gridPos", "id", "panels", "repeat", "title", "type"}
        panel = {key: item for key, item in panel.items() if key in keep}
    panel["panels"] = [_clean_panel(child) for child in panel.get("panels", [])]
    if panel["type"] != "row" and not panel["panels"]:
        del panel["panels"]
    return panel


def _clean_variable(variable: dict[str, Any]) -> dict[str, Any]:
    cleaned = {key: item for key, item in variable.items() if key not in _LEGACY_VARIABLE}
    if "current" in cleaned:
        cleaned["current"] = {k: v for k, v in cleaned["current"].items() if k != "tags"}
    if cleaned.get("type") != "interval":
        for key in ("auto", "auto_count", "auto_min"):
            cleaned.pop(key, None)
    return cleaned


def dashboard_json(dashboard: Any) -> dict[str, Any]:
    """The dashboard as plain JSON data, ready for `json.dumps(sort_keys=True)`."""
    raw: dict[str, Any] = json.loads(json.dumps(dashboard.to_json_data(), cls=DashboardEncoder))
    data: dict[str, Any] = _drop_unset(
        {key: item for key, item in raw.items() if key not in _LEGACY_DASHBOARD}
    )
    data["panels"] = [_clean_panel(panel) for panel in data["panels"]]
    data["templating"]["list"] = [_clean_variable(v) for v in data["templating"]["list"]]
    data["timepicker"] = {
        key: item for key, item in data["timepicker"].items() if key not in _LEGACY_TIMEPICKER
    }
    return data


def render(dashboard: Any) -> str:
    """Stable text of a dashboard file: sorted keys, two-space indent, final newline."""
    return json.dumps(dashboard_json(dashboard), indent=2, sort_keys=True) + "\n"
