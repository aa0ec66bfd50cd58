"""Panel builders on grafanalib 0.7.1: modern panels only, each with a unit and a description.

Two small subclasses fill grafanalib's gaps: `PromTarget` (Grafana's current Prometheus
query model; grafanalib's `Target` adds Graphite-era keys) and `ModernHeatmap` (the
Grafana 9+ heatmap; grafanalib's `Heatmap` writes the removed Angular shape).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attr
from grafanalib.core import Panel, RowPanel, Stat, Target, TimeSeries

__all__ = [
    "DATASOURCE",
    "ExemplarTarget",
    "ModernHeatmap",
    "PromTarget",
    "heatmap",
    "link",
    "row",
    "stat",
    "steps",
    "timeseries",
]

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
"""Every panel and target queries the dashboard's `datasource` variable."""

Steps = list[dict[str, Any]]

# grafanalib is untyped, so mypy's attrs plugin would give an attrs subclass an __init__
# with only the subclass's own fields; applied through an Any alias, it is left alone.
_attrs_class: Any = attr.s


class PromTarget(Target):  # type: ignore[misc]
    """A Prometheus target with only the keys of Grafana's current query model."""

    def to_json_data(self) -> dict[str, Any]:
        return {
            **self._exemplar(),
            "datasource": DATASOURCE,
            "editorMode": "code",
            "expr": self.expr,
            "format": self.format,
            "instant": self.instant,
            "legendFormat": self.legendFormat,
            "range": not self.instant,
            "refId": self.refId,
        }

    def _exemplar(self) -> dict[str, Any]:
        return {}


class ExemplarTarget(PromTarget):
    """A target whose series' exemplars Grafana fetches and draws (a duration
    histogram's: each leads to a recent job's trace)."""

    def _exemplar(self) -> dict[str, Any]:
        return {"exemplar": True}


@_attrs_class
class ModernHeatmap(Panel):  # type: ignore[misc]
    """`type: heatmap` with Grafana 9+ options over pre-bucketed (`format: heatmap`) data."""

    yAxisUnit: str = attr.ib(default="s")
    cellUnit: str = attr.ib(default="short")

    def to_json_data(self) -> dict[str, Any]:
        panel: dict[str, Any] = self.panel_json(
            {
                "fieldConfig": {
                    "defaults": {
                        "custom": {
                            "hideFrom": {"legend": False, "tooltip": False, "viz": False},
                            "scaleDistribution": {"type": "linear"},
                        },
                        "unit": self.cellUnit,
                    },
                    "overrides": [],
                },
                "options": {
                    # The exporter already buckets: plot its buckets, do not re-bucket.
                    "calculate": False,
                    "cellGap": 1,
                    "cellValues": {"unit": self.cellUnit},
                    "color": {
                        "exponent": 0.5,
                        "fill": "dark-orange",
                        "mode": "scheme",
                        "reverse": False,
                        "scale": "exponential",
                        "scheme": "Oranges",
                        "steps": 64,
                    },
                    "exemplars": {"color": "rgba(255,0,255,0.7)"},
                    "filterValues": {"le": 1e-9},
                    "legend": {"show": True},
                    "rowsFrame": {"layout": "auto"},
                    "showValue": "auto",
                    "tooltip": {"mode": "single", "yHistogram": True},
                    "yAxis": {"axisPlacement": "left", "reverse": False, "unit": self.yAxisUnit},
                },
                "type": "heatmap",
            }
        )
        return panel


def steps(*pairs: tuple[float | None, str]) -> Steps:
    """Threshold steps as plain dicts (grafanalib's Threshold writes "null" strings)."""
    return [{"color": color, "value": value} for value, color in pairs]


def link(title: str, url: str) -> dict[str, Any]:
    """A panel/dashboard link with every field Grafana's link model lists."""
    return {
        "asDropdown": False,
        "icon": "doc",
        "includeVars": False,
        "keepTime": False,
        "tags": [],
        "targetBlank": True,
        "title": title,
        "tooltip": title,
        "type": "link",
        "url": url,
    }


def _targets(
    queries: Sequence[tuple[str, str]],
    fmt: str = "time_series",
    instant: bool = False,
    exemplars: bool = False,
) -> list[PromTarget]:
    kind = ExemplarTarget if exemplars else PromTarget
    return [
        kind(
            expr=expr, legendFormat=legend, refId=chr(ord("A") + index), format=fmt, instant=instant
        )
        for index, (expr, legend) in enumerate(queries)
    ]


def timeseries(
    panel_id: int,
    title: str,
    description: str,
    unit: str,
    queries: Sequence[tuple[str, str]],
    *,
    threshold_steps: Steps | None = None,
    links: Sequence[dict[str, Any]] = (),
    value_min: float | None = 0,
    exemplars: bool = False,
) -> TimeSeries:
    """A line chart; `threshold_steps` are drawn as lines (an alert's threshold).
    `value_min` None lets the axis start where the data does (an SLI near 99%);
    `exemplars` draws the queries' exemplars (trace links)."""
    return TimeSeries(
        id=int(panel_id),
        title=title,
        description=description,
        dataSource=DATASOURCE,
        targets=_targets(queries, exemplars=exemplars),
        unit=unit,
        valueMin=value_min,
        fillOpacity=10,
        showPoints="never",
        legendDisplayMode="table",
        legendCalcs=["lastNotNull", "max"],
        tooltipMode="multi",
        tooltipSort="desc",
        thresholds=threshold_steps or steps((None, "green")),
        thresholdsStyleMode="dashed" if threshold_steps else "off",
        links=list(links),
        # Fields of the current options model that grafanalib 0.7.1 does not write.
        extraJson={"options": {"legend": {"showLegend": True}}},
    )


def stat(
    panel_id: int,
    title: str,
    description: str,
    unit: str,
    queries: Sequence[tuple[str, str]],
    threshold_steps: Steps,
    *,
    no_value: str = "No data",
    links: Sequence[dict[str, Any]] = (),
    instant: bool = False,
) -> Stat:
    """`instant`: the value now only, for a query too costly over every step of a range."""
    return Stat(
        id=int(panel_id),
        title=title,
        description=description,
        dataSource=DATASOURCE,
        targets=_targets(queries, instant=instant),
        format=unit,
        reduceCalc="lastNotNull",
        colorMode="background",
        graphMode="none",
        noValue=no_value,
        thresholds=threshold_steps,
        links=list(links),
        extraJson={
            "options": {
                "percentChangeColorMode": "standard",
                "showPercentChange": False,
                "wideLayout": True,
            }
        },
    )


def heatmap(
    panel_id: int, title: str, description: str, y_unit: str, cell_unit: str, expr: str
) -> ModernHeatmap:
    return ModernHeatmap(
        id=int(panel_id),
        title=title,
        description=description,
        dataSource=DATASOURCE,
        targets=_targets([(expr, "{{le}}")], fmt="heatmap", exemplars=True),
        yAxisUnit=y_unit,
        cellUnit=cell_unit,
        thresholds=steps((None, "green")),
    )


def row(panel_id: int, title: str) -> RowPanel:
    return RowPanel(id=int(panel_id), title=title)
