"""The /metrics page written straight from a ScrapeResult: text 0.0.4 / 1.0.0 or
OpenMetrics 1.0.0, byte-identical to prometheus_client's encoders of metric_families.

A 1,000-type scrape has ~60,000 samples. prometheus_client builds a Sample (with a
labels dict) for each, then its encoder sorts and escapes each one's labels: ~300 ms a
scrape for the text format, most of the exporter's time. Here the headers are made once
per namespace, a per-type line's start once per type, a histogram series' lines by one
str.format of a kept template (and kept while the type's stats hash stays the same:
PageMemory), and integer values skip float(). The samples are metric_families' own
(collector.py), and tests render the same results both ways and compare the bytes. A
content type this module does not write (another version, or a name escaping that would
change names) goes through prometheus_client.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache

from prometheus_client.utils import floatToGoString

from platform_common.jobs import metric_catalogue as catalogue

from .collector import (
    EXEMPLAR_TRACE_ID,
    ScrapeResult,
    Series,
    histogram_series,
    type_reading,
    value_series,
)
from .snapshot import LatencyHistogram, TypeSnapshot
from .stats_hash import BucketExemplar

__all__ = ["PageMemory", "page_format", "render_page"]

# Typed alias: prometheus_client's helper has no annotations. Its formatting ("+Inf",
# "1.7e+09", "0.25") is the one both encoders use.
_go_float: Callable[[float], str] = floatToGoString

# Name escapings that leave a legacy-valid name (every catalogue name, any namespace)
# as it is; "dots" rewrites underscores, so it goes through prometheus_client.
_PLAIN_NAME_ESCAPINGS = frozenset({"underscores", "allow-utf-8", "values"})


def page_format(content_type: str) -> bool | None:
    """For the content type prometheus_client's choose_encoder picked: True when this
    module writes it as OpenMetrics, False as the text format, None when it does not."""
    media, *raw_params = (part.strip() for part in content_type.split(";"))
    params = dict(param.split("=", 1) for param in raw_params if "=" in param)
    if params.get("escaping", "underscores") not in _PLAIN_NAME_ESCAPINGS:
        return None
    version = params.get("version")
    if media == "text/plain" and version in ("0.0.4", "1.0.0"):
        return False
    if media == "application/openmetrics-text" and version == "1.0.0":
        return True
    return None


class PageMemory:
    """What one page keeps for the next: the lines of each histogram series, by the
    histogram object they were written from (a quiet type's stats hash gives the same
    LatencyHistogram objects scrape after scrape, reader.py), and each per-type sample's
    line start (`name{agent_type="..."} `). Holds only what the last page used."""

    def __init__(self) -> None:
        self.histograms: dict[tuple[str, str], tuple[LatencyHistogram, str]] = {}
        self.prefixes: dict[str, dict[str, str]] = {}
        """Sample name -> agent type -> the start of its line."""


def render_page(
    result: ScrapeResult,
    namespace: str = "",
    openmetrics: bool = False,
    memory: PageMemory | None = None,
) -> bytes:
    """The page of `result`: what prometheus_client's text (or OpenMetrics) encoder
    writes for metric_families(result, namespace), byte for byte. `memory` carries what
    can be reused from one page to the next (the same for both formats)."""
    out: list[str] = []
    labels = _LabelText()
    kept = memory if memory is not None else PageMemory()
    written: dict[tuple[str, str], tuple[LatencyHistogram, str]] = {}
    snapshot = result.snapshot
    for family in _families(namespace, openmetrics):
        if family.metric.type == "histogram":
            histograms = histogram_series(family.metric, result)
            if histograms is not None:
                out.append(family.header)
                _histogram_lines(
                    out, family, histograms, labels, kept.histograms, written, openmetrics
                )
            continue
        reading = type_reading(family.metric)
        if reading is not None:
            if snapshot is not None:  # as value_series: no snapshot, no family
                out.append(family.header)
                _type_lines(out, family, snapshot.types, reading, kept)
            continue
        series = value_series(family.metric, result)
        if series is not None:
            out.append(family.header)
            _value_lines(out, family, series, labels)
    if openmetrics:
        out.append("# EOF\n")
    kept.histograms = written
    if snapshot is not None and _stale(kept, len(snapshot.types)):
        kept.prefixes = {}
    return "".join(out).encode("utf-8")


def _stale(memory: PageMemory, types: int) -> bool:
    """Whether the kept line starts are of many more types than a page has (a type set
    that churns must not grow them without bound)."""
    return any(len(starts) > 2 * types + 64 for starts in memory.prefixes.values())


def _type_lines(
    out: list[str],
    family: _Family,
    types: Sequence[TypeSnapshot],
    reading: Callable[[TypeSnapshot], float | None],
    memory: PageMemory,
) -> None:
    """The lines of a metric with one sample per agent type: the hot loop of the page
    (14 such metrics, 1,000 types)."""
    sample, (label,) = family.sample, family.label_names
    starts = memory.prefixes.setdefault(sample, {})
    for type_snapshot in types:
        value = reading(type_snapshot)
        if value is None:
            continue
        agent_type = type_snapshot.agent_type
        start = starts.get(agent_type)
        if start is None:
            start = starts[agent_type] = f'{sample}{{{label}="{_escape(agent_type)}"}} '
        if type(value) is int and 0 <= value < 1_000_000:
            out.append(f"{start}{value}.0\n")
        else:
            out.append(f"{start}{_go_float(value)}\n")


@dataclass(frozen=True, slots=True)
class _Family:
    metric: catalogue.Metric
    header: str
    """The HELP and TYPE (and OpenMetrics' UNIT) lines."""
    sample: str
    """The sample name: the family name, with `_total` on a counter."""
    label_names: tuple[str, ...]


@cache
def _families(namespace: str, openmetrics: bool) -> tuple[_Family, ...]:
    """Every catalogue metric's header and sample name, once per (namespace, format)."""
    families = []
    for metric in catalogue.CATALOGUE:
        full = metric.full_name(namespace)
        # Both encoders sort a sample's labels by name; the writers below keep the
        # catalogue's order (and `le` last), so the catalogue must already be sorted.
        names = (*metric.labels, "le") if metric.type == "histogram" else metric.labels
        if list(names) != sorted(names):
            raise ValueError(f"labels of {metric.name} are not in name order: {names}")
        if openmetrics:
            name = full.removesuffix("_total") if metric.type == "counter" else full
            help_text = _escape(metric.help)
            header = f"# HELP {name} {help_text}\n# TYPE {name} {metric.type}\n"
            if metric.type != "counter" and name.endswith("_seconds"):
                header += f"# UNIT {name} seconds\n"
        else:
            help_text = metric.help.replace("\\", r"\\").replace("\n", r"\n")
            header = f"# HELP {full} {help_text}\n# TYPE {full} {metric.type}\n"
        families.append(_Family(metric, header, full, metric.labels))
    return tuple(families)


class _LabelText:
    """`name="value"` texts, each escaped once per page (a type's label is on ~60 lines)."""

    def __init__(self) -> None:
        self._by_name: dict[str, dict[str, str]] = {}

    def of(self, name: str, value: str) -> str:
        texts = self._by_name.setdefault(name, {})
        text = texts.get(value)
        if text is None:
            text = texts[value] = f'{name}="{_escape(value)}"'
        return text

    def joined(self, names: Sequence[str], values: Sequence[str]) -> str:
        if len(names) == 1:
            return self.of(names[0], values[0])
        return ",".join([self.of(name, value) for name, value in zip(names, values, strict=True)])


def _value_lines(out: list[str], family: _Family, series: list[Series], labels: _LabelText) -> None:
    sample, names = family.sample, family.label_names
    if not names:
        out.extend(f"{sample} {_number(value)}\n" for _, value in series)
        return
    if len(names) != 2:
        for values, value in series:
            out.append(f"{sample}{{{labels.joined(names, values)}}} {_number(value)}\n")
        return
    # (agent_type, error_class), (agent_type, worker), (node, policy): a few lines a type.
    first, second = names
    for (first_value, second_value), value in series:
        text = f"{labels.of(first, first_value)},{labels.of(second, second_value)}"
        out.append(f"{sample}{{{text}}} {_number(value)}\n")


def _histogram_lines(
    out: list[str],
    family: _Family,
    histograms: list[tuple[tuple[str, ...], LatencyHistogram]],
    labels: _LabelText,
    last: dict[tuple[str, str], tuple[LatencyHistogram, str]],
    written: dict[tuple[str, str], tuple[LatencyHistogram, str]],
    openmetrics: bool,
) -> None:
    sample, names = family.sample, family.label_names
    for values, histogram in histograms:
        text = labels.joined(names, values) if names else ""
        if openmetrics and histogram.exemplars:
            # Exemplars are OpenMetrics' alone: these lines are never kept for a text page.
            out.append(_histogram_text(sample, text, histogram, dict(histogram.exemplars)))
            continue
        key = (sample, text)
        kept = last.get(key)
        if kept is not None and kept[0] is histogram:
            lines = kept[1]
        else:
            lines = _histogram_text(sample, text, histogram)
        written[key] = (histogram, lines)
        out.append(lines)


def _histogram_text(
    sample: str,
    label_text: str,
    histogram: LatencyHistogram,
    exemplars: dict[float, BucketExemplar] | None = None,
) -> str:
    """The `_bucket`, `_count` and `_sum` lines of one histogram series; `exemplars`
    (OpenMetrics) end the lines of their buckets."""
    bounds, counts = zip(*histogram.buckets, strict=True)
    small = set(map(type, counts)) == _JUST_INT and min(counts) >= 0 and max(counts) < 10**6
    if small and not exemplars:
        # Small integers (the usual case), written `<n>.0` as floatToGoString writes
        # them: one format call from the lines' template.
        template = _template(sample, bool(label_text), bounds)
        return template.format(*counts, L=label_text, S=_go_float(histogram.sum))
    lines = []
    bucket = f"{sample}_bucket{{{label_text}," if label_text else f"{sample}_bucket{{"
    for bound, count in histogram.buckets:
        exemplar = "" if not exemplars or bound not in exemplars else _exemplar(exemplars[bound])
        lines.append(f'{bucket}le="{_le(bound)}"}} {_number(count)}{exemplar}\n')
    if float(_le(bounds[0])) >= 0:
        braces = f"{{{label_text}}}" if label_text else ""
        lines.append(f"{sample}_count{braces} {_number(counts[-1])}\n")
        lines.append(f"{sample}_sum{braces} {_number(histogram.sum)}\n")
    return "".join(lines)


_JUST_INT = {int}  # exactly int: a bool would be written `True.0`
_TEMPLATES: dict[tuple[str, bool, tuple[float, ...], tuple[float, ...]], str] = {}


def _template(sample: str, labelled: bool, bounds: tuple[float, ...]) -> str:
    """A str.format template of a histogram series' lines: `{L}` its label text, `{0}`...
    its cumulative counts, `{S}` its sum as written. Kept per (sample, bounds)."""
    # 0.0 == -0.0, so bounds alone would share one template between le="0.0" and
    # le="-0.0": the zeros' signs are part of the key.
    key = (sample, labelled, bounds, tuple(math.copysign(1, b) for b in bounds if b == 0))
    template = _TEMPLATES.get(key)
    if template is not None:
        return template
    bucket = sample + "_bucket{{{L}," if labelled else sample + "_bucket{{"
    parts = [f'{bucket}le="{_le(bound)}"}}}} {{{index}}}.0\n' for index, bound in enumerate(bounds)]
    # prometheus_client leaves count and sum out when the first `le` is negative.
    if float(_le(bounds[0])) >= 0:
        braces = "{{{L}}}" if labelled else ""
        parts.append(f"{sample}_count{braces} {{{len(bounds) - 1}}}.0\n")
        parts.append(f"{sample}_sum{braces} {{S}}\n")
    template = "".join(parts)
    if len(_TEMPLATES) < 256:  # bounds come from Redis: keep this bounded
        _TEMPLATES[key] = template
    return template


def _exemplar(exemplar: BucketExemplar) -> str:
    """` # {trace_id="..."} <value> <timestamp>`, as prometheus_client's OpenMetrics
    encoder writes an exemplar (the trace id is hex: nothing to escape)."""
    return (
        f' # {{{EXEMPLAR_TRACE_ID}="{exemplar.trace_id}"}} '
        f"{_go_float(exemplar.value)} {exemplar.timestamp}"
    )


def _number(value: float) -> str:
    """floatToGoString's text, without its float() and repr() for an integer below 1e6
    (where Go's exponent form starts): `<n>.0`, as repr(float(n)) writes it."""
    if type(value) is int and 0 <= value < 1_000_000:
        return f"{value}.0"
    return _go_float(value)


_LE: dict[float, str] = {}


def _le(bound: float) -> str:
    """The `le` label as Prometheus' own clients write it ("0.5", "30.0", "+Inf"), the
    collector's text, kept per bound (the same dozen bounds in every histogram)."""
    text = _LE.get(bound)
    if text is None:
        text = "+Inf" if math.isinf(bound) else repr(float(bound))
        # 0.0 and -0.0 are one key but two texts; bounds come from Redis: keep it bounded.
        if bound != 0 and len(_LE) < 1024:
            _LE[bound] = text
    return text


def _escape(value: str) -> str:
    """A label value (or OpenMetrics help text) as both encoders escape it."""
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value
