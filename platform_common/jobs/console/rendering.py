"""The console's jinja2 environment (autoescaped: payloads and errors are user data), the
filters its templates use for times and JSON, and the overview's chart as SVG bars."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import jinja2
from markupsafe import Markup

from ..operations import Minute, formatting
from ..operations.stored import readable

__all__ = [
    "MAX_SHOWN_JSON",
    "ChartBar",
    "ShownJson",
    "age",
    "chart_bars",
    "environment",
    "path_segment",
    "pretty_json",
    "printable",
    "shown_json",
    "shown_text",
    "timestamp",
]

MAX_SHOWN_JSON = 128 * 1024
"""Most characters of one payload or result a job page shows: a payload may be megabytes
(QUEUE_MAX_PAYLOAD_BYTES is a setting), and even escaped this keeps the page under 1 MiB."""


def environment() -> jinja2.Environment:
    """Templates from the package data, every value escaped unless a template says not."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("platform_common.jobs.console", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=printable,
    )
    env.filters.update(
        age=age, timestamp=timestamp, pretty_json=pretty_json, shown_json=shown_json,
        shown_text=shown_text, path_segment=path_segment,
    )  # fmt: skip
    return env


def printable(value: Any) -> Any:
    """Every value a page shows: text holding the surrogate escapes of bytes that are not
    UTF-8 (a job id stored so, see operations.stored) as \\xNN, which UTF-8 can carry."""
    if isinstance(value, str) and not isinstance(value, Markup):
        try:
            value.encode()
        except UnicodeEncodeError:
            return readable(value)
    return value


def path_segment(value: str) -> str:
    """`value` as one segment of a URL path: "/" and every other reserved character
    percent-encoded (the route takes the rest of the path, so "a/b" is one job id)."""
    return quote(value.encode("utf-8", "surrogateescape"), safe="")


def age(seconds: float | None) -> str:
    """As the CLI shows it, never negative (a clock a little ahead reads as 0.0s)."""
    return formatting.age(None if seconds is None else max(0.0, seconds))


def timestamp(seconds: float | None) -> str:
    """UTC ISO 8601 to the second: a page shows the relative age beside it."""
    return formatting.timestamp(seconds, "seconds")


def pretty_json(value: Any) -> str:
    """Indented JSON (escaped by the template like any other text)."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


@dataclass(frozen=True, slots=True)
class ShownJson:
    """The start of a value's pretty JSON, and how long the whole of it is."""

    text: str
    total: int
    """Characters of the whole pretty JSON (`text` is all of it when they match)."""

    @property
    def cut(self) -> bool:
        return len(self.text) < self.total


def shown_json(value: Any, limit: int = MAX_SHOWN_JSON) -> ShownJson:
    """pretty_json(value), cut to its first `limit` characters."""
    return shown_text(pretty_json(value), limit)


def shown_text(whole: str, limit: int = MAX_SHOWN_JSON) -> ShownJson:
    """`whole` (a stored value that does not parse, as text), cut as shown_json cuts."""
    return ShownJson(whole[:limit], len(whole))


@dataclass(frozen=True, slots=True)
class ChartBar:
    """One minute's bar: heights in chart units (0..CHART_HEIGHT), stacked from the base."""

    x: int
    completed_height: float
    failed_height: float
    covered: bool
    label: str
    """The minute and its counts, as the bar's tooltip and for screen readers."""


CHART_HEIGHT = 40
BAR_WIDTH = 4


def chart_bars(minutes: tuple[Minute, ...]) -> list[ChartBar]:
    """The bars of one agent type's chart, scaled to its busiest bar."""
    peak = max((m.completed + m.failed for m in minutes), default=0) or 1
    scale = CHART_HEIGHT / peak
    bars = []
    for index, minute in enumerate(minutes):
        clock = datetime.fromtimestamp(minute.start, UTC).strftime("%H:%M UTC")
        if minute.minutes > 1:
            clock += f" (+{minute.minutes} min)"
        label = (
            f"{clock}: {minute.completed} completed, {minute.failed} failed"
            if minute.covered
            else f"{clock}: not read"
        )
        bars.append(
            ChartBar(
                x=index * BAR_WIDTH,
                completed_height=round(minute.completed * scale, 2),
                failed_height=round(minute.failed * scale, 2),
                covered=minute.covered,
                label=label,
            )
        )
    return bars
