"""Service-level objectives per agent type: what they measure, their targets and windows.

Two event-based (ratio) SLOs over the queue's counters: **availability**, of the jobs
that finished the share that completed (failed for good and expired jobs are the
errors), and **latency**, of the jobs that completed the share within
`threshold_seconds` of their enqueue, read from the latency histogram's bucket of that
bound (so it must be one of the bounds). Each has a `target` (0.99 = 99%), whose error
budget is `1 - target`; burn rate = error ratio / error budget. What they count, and
why: docs/operations.md, "SLOs". The alerts are the SRE workbook's multi-window,
multi-burn-rate pairs (`BURN_RATE_PAIRS`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

from platform_common.jobs.errors import ConfigurationError
from platform_common.jobs.validation import is_finite_number

__all__ = [
    "ALERT_WINDOWS",
    "BURN_RATE_PAIRS",
    "SLO_KINDS",
    "BurnRatePair",
    "Objective",
    "ObjectiveOverride",
    "SloKind",
    "SloOverride",
    "check_objective",
    "objectives_of",
    "window_seconds",
]

SloKind = Literal["availability", "latency"]
SLO_KINDS: tuple[SloKind, ...] = ("availability", "latency")


@dataclass(frozen=True, slots=True)
class BurnRatePair:
    """One row of the workbook's table: alert when the burn rate over both windows is
    above `factor` (the long window proves it lasts, the short one that it still does)."""

    severity: Literal["page", "ticket"]
    factor: float
    long: str
    short: str


BURN_RATE_PAIRS: tuple[BurnRatePair, ...] = (
    BurnRatePair("page", 14.4, "1h", "5m"),
    BurnRatePair("page", 6, "6h", "30m"),
    BurnRatePair("ticket", 3, "1d", "2h"),
    BurnRatePair("ticket", 1, "3d", "6h"),
)
"""The SRE workbook's pairs ("Alerting on SLOs", multiwindow, multi-burn-rate alerts)."""

ALERT_WINDOWS: tuple[str, ...] = ("5m", "30m", "1h", "2h", "6h", "1d", "3d")
"""Every window a pair reads, shortest first: each gets a recording rule per SLI."""

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_WINDOW = re.compile(r"(?:\d+[smhdw])+")
_FIELDS = {
    "availability": ("target", "window"),
    "latency": ("target", "threshold_seconds", "window"),
}


def window_seconds(window: str) -> int:
    """'28d' -> 2419200, '1h30m' -> 5400 (Prometheus' duration units up to weeks)."""
    return sum(int(n) * _UNITS[unit] for n, unit in re.findall(r"(\d+)([smhdw])", window))


_SEVEREST = max(pair.factor for pair in BURN_RATE_PAIRS)
_LONGEST = max(ALERT_WINDOWS, key=window_seconds)


@dataclass(frozen=True, slots=True)
class Objective:
    """One SLO of one agent type (or the default of every type)."""

    target: float
    """The objective: the share of events that must be good, in (0, 1)."""
    window: str
    """The period the error budget is counted over, a Prometheus duration (28d, 4w)."""
    threshold_seconds: float | None = None
    """Latency only: the enqueue-to-completion latency a good job is within."""

    @property
    def error_budget(self) -> float:
        return 1 - self.target

    @property
    def window_days(self) -> float:
        return window_seconds(self.window) / 86400

    @classmethod
    def from_yaml(cls, key: str, value: Any, kind: SloKind, origin: str) -> Objective:
        """A mapping with every field of `kind`, or an error naming `key`."""
        fields = _mapping(key, value, _FIELDS[kind], origin)
        missing = [name for name in _FIELDS[kind] if name not in fields]
        if missing:
            raise ConfigurationError(f"{key}.{missing[0]}", f"missing ({origin})")
        return cls(**fields)

    def merged(self, override: ObjectiveOverride | None) -> Objective:
        if override is None:
            return self
        return replace(self, **{k: v for k, v in asdict(override).items() if v is not None})


@dataclass(frozen=True, slots=True)
class ObjectiveOverride:
    """What one agent type changes of a default objective (None: the default's)."""

    target: float | None = None
    window: str | None = None
    threshold_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class SloOverride:
    """One agent type's changes to the default objectives."""

    availability: ObjectiveOverride | None = None
    latency: ObjectiveOverride | None = None

    @classmethod
    def from_yaml(cls, key: str, value: Any, origin: str) -> SloOverride:
        kinds = _keys(key, value, SLO_KINDS, origin)
        changes = {
            kind: ObjectiveOverride(**_mapping(f"{key}.{kind}", part, _FIELDS[kind], origin))
            for kind, part in kinds.items()
        }
        return cls(**changes)

    def of(self, kind: SloKind) -> ObjectiveOverride | None:
        return self.availability if kind == "availability" else self.latency


def _keys(key: str, value: Any, allowed: tuple[str, ...], origin: str) -> dict[str, Any]:
    """`value` as a mapping whose keys are among `allowed`, or an error naming the key."""
    if not isinstance(value, dict):
        raise ConfigurationError(key, f"must be a mapping of {', '.join(allowed)} ({origin})")
    for name in value:
        if name not in allowed:
            raise ConfigurationError(
                f"{key}.{name}", f"unknown; the keys are {', '.join(allowed)} ({origin})"
            )
    return value


def _mapping(key: str, value: Any, allowed: tuple[str, ...], origin: str) -> dict[str, Any]:
    """`value` as a mapping of `allowed` keys, each value typed; an error naming the key
    (`slo_latency.target`) otherwise."""
    typed: dict[str, Any] = {}
    for name, item in _keys(key, value, allowed, origin).items():
        if name == "window":
            if not isinstance(item, str):
                raise ConfigurationError(f"{key}.{name}", f"must be a duration like 28d ({origin})")
            typed[name] = item
        elif is_finite_number(item):
            typed[name] = float(item)
        else:
            found = f"{type(item).__name__} {item!r}"
            raise ConfigurationError(f"{key}.{name}", f"must be a number, got {found} ({origin})")
    return typed


def check_objective(
    key: str,
    target: float | None,
    window: str | None,
    threshold_seconds: float | None,
    bucket_bounds: tuple[float, ...],
) -> None:
    """Refuse what no SLO can mean, naming `key`'s field: a target with no error budget
    (>= 1), or one so low that even the fastest pair can never fire; a window shorter
    than the alerts' longest; a latency threshold that is not a histogram bucket bound."""
    if target is not None:
        if not 0 < target < 1:
            raise ConfigurationError(
                f"{key}.target",
                f"must be in (0, 1) (0.99 = 99%; 1 would leave no error budget), got {target!r}",
            )
        if _SEVEREST * (1 - target) >= 1:
            lowest = 1 - 1 / _SEVEREST
            raise ConfigurationError(
                f"{key}.target",
                f"{target!r} leaves an error budget of {1 - target:.4g}: a {_SEVEREST:g}x burn "
                f"would need more than every job to fail, so the page could never fire; "
                f"use a target above {lowest:.4f}",
            )
    if window is not None:
        if not _WINDOW.fullmatch(window):
            raise ConfigurationError(f"{key}.window", f"not a duration like 28d: {window!r}")
        if window_seconds(window) < window_seconds(_LONGEST):
            raise ConfigurationError(
                f"{key}.window",
                f"{window!r} is shorter than the {_LONGEST} the slowest burn-rate alert reads",
            )
    if threshold_seconds is not None and threshold_seconds not in bucket_bounds:
        bounds = ", ".join(f"{bound:g}" for bound in bucket_bounds)
        raise ConfigurationError(
            f"{key}.threshold_seconds",
            f"{threshold_seconds:g} is not a bound of the latency histogram's buckets "
            f"({bounds}); pick one, or set latency_buckets to the queue's "
            "QUEUE_LATENCY_BUCKETS",
        )


def objectives_of(
    default: Objective, overrides: Mapping[str, SloOverride], kind: SloKind
) -> dict[str, Objective]:
    """The objective of each agent type with an override of `kind` (sorted)."""
    return {
        agent_type: default.merged(override.of(kind))
        for agent_type, override in sorted(overrides.items())
        if override.of(kind) is not None
    }
