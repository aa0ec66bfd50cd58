"""One agent type's stats hash (keys.py: counters, histograms, error classes) -> what it
says, as plain data.

Never raises on bad data: a value that does not parse is skipped and counted in
`malformed`. A scrape may parse ~1,000 hashes of ~50 fields, so the fields are sorted by
what they are in one pass, each field name's meaning kept (the same few dozen names in
every hash); the reader parses a type's hash again only when it changed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Final

from platform_common.jobs.keys import (
    DEFAULT_LATENCY_BUCKETS,
    ERROR_CLASS_PREFIX,
    MAX_ERROR_CLASSES,
    OTHER_ERROR_CLASS,
    STATS_COUNTERS,
    histogram_bucket_field,
    histogram_count_field,
    histogram_exemplar_field,
    histogram_sum_field,
)
from platform_common.jobs.redis.replies import finite_number, hash_fields

from .label_values import capped_label_value

__all__ = ["HISTOGRAMS", "BucketExemplar", "LatencyHistogram", "StatsReading", "parse_stats"]

HISTOGRAMS = ("latency", "wait", "run")
"""The histograms of TypeSnapshot, by their keys.STATS_HISTOGRAMS name."""


@dataclass(frozen=True, slots=True)
class BucketExemplar:
    """A recent job observed in one bucket (keys.EXEMPLAR_FIELD_FORMAT): the OpenMetrics
    exemplar that leads from the bucket to the job's trace."""

    trace_id: str
    """The job's W3C trace id, 32 lowercase hex digits."""
    value: float
    """What was observed, seconds (within the bucket)."""
    timestamp: float
    """When, Unix seconds."""


@dataclass(frozen=True, slots=True)
class LatencyHistogram:
    """One duration histogram of one agent type, in Prometheus' shape."""

    buckets: tuple[tuple[float, int], ...]
    """(upper bound in seconds, CUMULATIVE count), ascending, the last bound is +Inf."""
    sum: float
    """Sum of all observed latencies, seconds."""
    exemplars: tuple[tuple[float, BucketExemplar], ...] = ()
    """(upper bound, its exemplar) of the buckets that have one, ascending."""

    @property
    def count(self) -> int:
        return self.buckets[-1][1]


@dataclass(frozen=True, slots=True)
class StatsReading:
    """What one stats hash says (shared by the scrapes that read the same hash)."""

    counters: Mapping[str, int]
    """keys.STATS_COUNTERS name -> value; a missing one is 0, a malformed one absent."""
    histograms: Mapping[str, LatencyHistogram | None]
    """HISTOGRAMS name -> histogram; None when its fields are unusable."""
    error_classes: Mapping[str, int]
    """Failed attempts by exception class (bounded in number and length, see
    `_error_classes`)."""
    malformed: int
    """Values of the hash skipped because they did not parse."""


def parse_stats(
    stats: object, bucket_bounds: Sequence[float] = DEFAULT_LATENCY_BUCKETS
) -> StatsReading:
    """HGETALL's reply (flat or a dict) -> StatsReading; `bucket_bounds` are the queue's
    configured latency buckets (see `_histogram`)."""
    fields = hash_fields(stats)
    bounds = _configured_bounds(tuple(bucket_bounds))
    malformed = 0
    per_bound: dict[str, dict[float, int]] = {name: {} for name in HISTOGRAMS}
    exemplars: dict[str, dict[float, BucketExemplar]] = {name: {} for name in HISTOGRAMS}
    error_fields: list[tuple[str, str]] = []
    kinds = _FIELD_KINDS
    for name, raw in fields.items():
        kind = kinds.get(name, _UNKNOWN)
        if kind is _UNKNOWN:
            kind = _classify(name)
        if kind is None:
            continue
        if isinstance(kind, _ExemplarField):
            exemplar = _exemplar(raw, kind.bound)
            if exemplar is None:
                malformed += 1
            else:
                exemplars[kind.histogram][kind.bound] = exemplar  # type: ignore[index]
            continue
        if not isinstance(kind, tuple):
            error_fields.append((name, raw))
            continue
        histogram, bound = kind
        if bound is None or not raw.isdigit():
            malformed += 1
            continue
        counts = per_bound[histogram]
        counts[bound] = counts.get(bound, 0) + int(raw)
    counters: dict[str, int] = {}
    for name in STATS_COUNTERS:
        text = fields.get(name)
        if text is None:
            counters[name] = 0
        elif text.isdigit():
            counters[name] = int(text)
        else:
            malformed += 1
    histograms: dict[str, LatencyHistogram | None] = {}
    for name in HISTOGRAMS:
        histograms[name], errors = _histogram(
            fields, name, per_bound[name], bounds, exemplars[name]
        )
        malformed += errors
    error_classes, errors = _error_classes(error_fields)
    return StatsReading(counters, histograms, error_classes, malformed + errors)


def _histogram(
    fields: Mapping[str, str],
    name: str,
    per_bound: dict[float, int],
    bounds: _Bounds,
    exemplars: Mapping[float, BucketExemplar],
) -> tuple[LatencyHistogram | None, int]:
    """Histogram `name` from its NON-cumulative bucket counts by bound, summed into
    cumulative `le` buckets.

    The queue only creates a bucket's field when an observation lands in it. Bounds
    without a field are filled with 0 when every field found is a configured bound: the
    `le` set is then stable from the first scrape (rate() and histogram_quantile need
    that). A field outside them means the queue uses other buckets: then only the found
    ones are exported (a missing bound's count is unknown, not 0).
    """
    malformed = 0
    buckets: tuple[tuple[float, int], ...]
    if not per_bound:
        buckets = bounds.empty  # nothing observed yet: the common case of a quiet type
    else:
        if per_bound.keys() <= bounds.expected:
            ordered = dict.fromkeys(bounds.ordered, 0)
            ordered.update(per_bound)  # existing keys keep their (ascending) place
        else:
            per_bound.setdefault(math.inf, 0)
            ordered = {bound: per_bound[bound] for bound in sorted(per_bound)}
        buckets = tuple(zip(ordered, accumulate(ordered.values()), strict=True))
    total = finite_number(fields.get(_SUM_FIELDS[name], "0"))
    if total is None or total < 0:
        # Without a sum the histogram would lie about the mean: leave it out.
        return None, 1
    count = fields.get(_COUNT_FIELDS[name])
    if count is not None and (not count.isdigit() or int(count) != buckets[-1][1]):
        # The buckets are authoritative (the histogram must be self-consistent); a
        # count that disagrees with them is reported, not exported.
        malformed += 1
    if not exemplars:
        return LatencyHistogram(buckets, total), malformed
    # Only a bucket that is exported, and has seen a job (its cumulative count grew), can
    # carry one.
    before = [0, *(count for _, count in buckets[:-1])]
    seen = {bound for (bound, count), was in zip(buckets, before, strict=True) if count > was}
    kept = tuple((bound, exemplars[bound]) for bound in sorted(exemplars) if bound in seen)
    malformed += len(exemplars) - len(kept)
    return LatencyHistogram(buckets, total, kept), malformed


_TRACE_ID = re.compile(r"[0-9a-f]{32}")


def _exemplar(raw: str, bound: float | None) -> BucketExemplar | None:
    """An exemplar field's value (keys.EXEMPLAR_FIELD_FORMAT), or None when it does not
    parse, its trace id is not a valid W3C one, or its value is not within `bound`."""
    parts = raw.split(" ")
    if bound is None or len(parts) != 3:
        return None
    trace_id, seconds, millis = parts
    if not _TRACE_ID.fullmatch(trace_id) or trace_id == "0" * 32:
        return None
    value = finite_number(seconds)
    if value is None or not 0 <= value <= bound:
        return None
    if not (millis.isdigit() and len(millis) <= 15):
        return None
    return BucketExemplar(trace_id, value, int(millis) / 1000)


def _error_classes(error_fields: Sequence[tuple[str, str]]) -> tuple[dict[str, int], int]:
    """Failed attempts by (capped) class, from the hash's `error:<class>` fields. A hash
    with more classes than the queue's cap (written by hand) has the excess folded into
    `other`, in field-name order, so the label stays bounded here too."""
    malformed = 0
    counts: dict[str, int] = {}
    for name, raw in sorted(error_fields):
        if not raw.isdigit():
            malformed += 1
            continue
        error_class = capped_label_value(name[len(ERROR_CLASS_PREFIX) :])
        named = len(counts) - (OTHER_ERROR_CLASS in counts)
        if error_class != OTHER_ERROR_CLASS and named >= MAX_ERROR_CLASSES:
            error_class = OTHER_ERROR_CLASS
        counts[error_class] = counts.get(error_class, 0) + int(raw)
    return counts, malformed


_SUM_FIELDS = {name: histogram_sum_field(name) for name in HISTOGRAMS}
_COUNT_FIELDS = {name: histogram_count_field(name) for name in HISTOGRAMS}
_BUCKET_PREFIXES = {histogram_bucket_field(n, 0.0).split(":", 1)[0] + ":": n for n in HISTOGRAMS}
"""Bucket field prefix ("latency_le:") -> histogram name."""
_EXEMPLAR_PREFIXES = {
    histogram_exemplar_field(n, 0.0).split(":", 1)[0] + ":": n for n in HISTOGRAMS
}
"""Exemplar field prefix ("latency_ex:") -> histogram name."""


@dataclass(frozen=True, slots=True)
class _ExemplarField:
    histogram: str
    bound: float | None
    """None when the bound does not parse."""


_ERROR_FIELD: Final = "error"
FieldKind = tuple[str, float | None] | _ExemplarField | str | None
"""(histogram, bound or None when the bound does not parse) for a bucket field, an
_ExemplarField for an exemplar, _ERROR_FIELD for an error class, None for any other."""
_FIELD_KINDS: dict[str, FieldKind] = {}
_UNKNOWN: FieldKind = ("not yet classified", None)
"""What _FIELD_KINDS answers for a name it does not hold (compared by identity)."""


def _classify(name: str) -> FieldKind:
    """What field `name` is, remembered (a hash with odd fields must not grow the memory
    without bound, so only so many names are)."""
    kind: FieldKind = None
    if name.startswith(ERROR_CLASS_PREFIX):
        kind = _ERROR_FIELD
    else:
        colon = name.find(":")
        prefix = name[: colon + 1] if colon > 0 else ""
        histogram = _BUCKET_PREFIXES.get(prefix)
        if histogram is not None:
            kind = (histogram, _bound(name[colon + 1 :]))
        elif prefix in _EXEMPLAR_PREFIXES:
            kind = _ExemplarField(_EXEMPLAR_PREFIXES[prefix], _bound(name[colon + 1 :]))
    if len(_FIELD_KINDS) < 4096:
        _FIELD_KINDS[name] = kind
    return kind


@dataclass(frozen=True, slots=True)
class _Bounds:
    """The configured bucket bounds, +Inf included: as a set, and ascending."""

    expected: frozenset[float]
    ordered: tuple[float, ...]
    empty: tuple[tuple[float, int], ...]
    """The buckets of a histogram with no observation: every bound, count 0."""


_BOUNDS_OF: dict[tuple[float, ...], _Bounds] = {}


def _configured_bounds(bucket_bounds: tuple[float, ...]) -> _Bounds:
    """The _Bounds of a configuration, made once (one per process, in practice)."""
    bounds = _BOUNDS_OF.get(bucket_bounds)
    if bounds is None:
        expected = frozenset(float(bound) for bound in bucket_bounds) | {math.inf}
        ordered = tuple(sorted(expected))
        bounds = _Bounds(expected, ordered, tuple((bound, 0) for bound in ordered))
        if len(_BOUNDS_OF) < 16:
            _BOUNDS_OF[bucket_bounds] = bounds
    return bounds


def _bound(text: str) -> float | None:
    if text == "+Inf":
        return math.inf
    value = finite_number(text)
    return value if value is not None and value >= 0 else None
