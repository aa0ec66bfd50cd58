"""PromQL of the SLOs: each SLI's error ratio, objective, budget and burn rate, inline or recorded.

`SloQueries` builds every expression from the exporter's own series (`inline`): what
the recording rules record, and what the Grafana alert rules and the dashboard query
(they must work on a Prometheus without the rule file). The Prometheus alert rules and
`agentjobs slo` read the recordings (`recorded`), named as sloth names them
(`slo:sli_error:ratio_rate5m`, ...) and labelled `job`, `agent_type` and `slo`.

Per agent type the objective, the latency threshold and the window may differ: each is
a partition of the agent types (`type_groups`) joined with `or`, so each type has
exactly one value.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, replace
from typing import TypeVar

from platform_common.jobs.metric_catalogue import AGENT_TYPE

from . import queries as q
from .config import MonitoringConfig
from .slo import ALERT_WINDOWS, BURN_RATE_PAIRS, SLO_KINDS, BurnRatePair, SloKind, window_seconds

__all__ = [
    "BUDGET_REMAINING",
    "BY_SLO",
    "CURRENT_BURN",
    "ERROR_BUDGET",
    "OBJECTIVE",
    "PERIOD_BURN",
    "TIME_PERIOD",
    "RecordingRule",
    "SloQueries",
    "burn_alert",
    "le_text",
    "pairs_of",
    "recording_rules",
    "sli_error",
    "type_groups",
]

OBJECTIVE = "slo:objective:ratio"
"""The target of each agent type's SLO (0.99)."""
ERROR_BUDGET = "slo:error_budget:ratio"
"""1 - the objective: the share of the window's events that may be bad."""
TIME_PERIOD = "slo:time_period:days"
"""The SLO's window in days (28)."""
CURRENT_BURN = "slo:current_burn_rate:ratio"
"""The burn rate over the shortest alert window (5m): how fast the budget goes now."""
PERIOD_BURN = "slo:period_burn_rate:ratio"
"""The burn rate over the whole window: the share of the budget spent (1 = all of it)."""
BUDGET_REMAINING = "slo:period_error_budget_remaining:ratio"
"""1 - the period burn rate: the share of the window's budget left (negative: overspent)."""
BY_SLO = f"job, {AGENT_TYPE}, slo"
"""The labels of every recorded SLO series."""

T = TypeVar("T", bound=Hashable)


def sli_error(window: str) -> str:
    """The recorded error ratio of an SLI over `window`: `slo:sli_error:ratio_rate5m`."""
    return f"slo:sli_error:ratio_rate{window}"


def le_text(bound: float) -> str:
    """A bucket's `le` label as the exporter writes it (and Prometheus 3 normalizes it):
    "30.0", "0.25"."""
    return repr(float(bound))


def type_groups(default: T, overrides: Mapping[str, T]) -> list[tuple[T, str | None]]:
    """(value, `agent_type` matcher) per value: the types whose override differs from
    `default` by name, every other type in the default's (None: no type differs)."""
    differing = {name: value for name, value in sorted(overrides.items()) if value != default}
    by_value: dict[T, list[str]] = {}
    for name, value in differing.items():
        by_value.setdefault(value, []).append(name)
    groups: list[tuple[T, str | None]] = [
        (default, f'{AGENT_TYPE}!~"{_alternatives(differing)}"' if differing else None)
    ]
    groups += [
        (value, f'{AGENT_TYPE}=~"{_alternatives(names)}"') for value, names in by_value.items()
    ]
    return groups


def _alternatives(names: object) -> str:
    # Agent types are [A-Za-z0-9_.:/-]: only '.' is a regex operator; `\\.` in a PromQL
    # string is the regex `\.`.
    return "|".join(str(name).replace(".", "\\\\.") for name in names)  # type: ignore[attr-defined]


def _narrowed(sel: q.Selector, matcher: str | None) -> q.Selector:
    """`sel` restricted to one group of agent types (every SLO series has the label)."""
    if matcher is None:
        return sel
    return replace(sel, target_matchers=(*sel.target_matchers, matcher))


@dataclass(frozen=True, slots=True)
class SloQueries:
    """The inline PromQL of one SLO of every agent type, under one selector."""

    config: MonitoringConfig
    kind: SloKind
    sel: q.Selector

    def _groups(self, field: str) -> list[tuple[object, str | None]]:
        default = getattr(self.config.slo_default(self.kind), field)
        overrides = {
            name: getattr(objective, field)
            for name, objective in self.config.slo_objectives(self.kind).items()
        }
        return type_groups(default, overrides)

    def _per_type(self, value_of: Callable[[object, q.Selector], str], field: str) -> str:
        parts = [value_of(value, _narrowed(self.sel, m)) for value, m in self._groups(field)]
        return parts[0] if len(parts) == 1 else "(" + " or ".join(parts) + ")"

    def _constant(self, field: str, number: Callable[[object], float]) -> str:
        """Each agent type's `field` (as `number` reads it) as a series per (job,
        agent_type), for every type the exporter reports: its queue depth gauge's, as
        `queries.per_type_limit` does."""

        def value_of(value: object, sel: q.Selector) -> str:
            every_type = f"group by (job, {AGENT_TYPE}) ({sel.series('queue_depth')})"
            return f"{every_type} * {q.number(number(value))}"

        return self._per_type(value_of, field)

    def error_ratio(self, window: str, period: str | None = None) -> str:
        """Bad events / all events over `window`, per agent type; NaN without events.
        `period`: only the agent types whose SLO window is `period`."""
        sel = self.sel
        if period is not None:
            [matcher] = [m for value, m in self._groups("window") if value == period]
            sel = _narrowed(sel, matcher)
        if self.kind == "availability":
            failed, expired = (q.rate_by_type(sel, key, window) for key in ("failed", "expired"))
            bad = f"{failed} + {expired}"
            return f"({bad}) / ({q.rate_by_type(sel, 'completed', window)} + {bad})"
        total = f"max by (job, {AGENT_TYPE}) ({sel.rate('latency', '_count', window)})"

        def good(threshold: object, group: q.Selector) -> str:
            assert isinstance(threshold, float)
            bucket = replace(
                group, target_matchers=(*group.target_matchers, f'le="{le_text(threshold)}"')
            )
            return f"max by (job, {AGENT_TYPE}) ({bucket.rate('latency', '_bucket', window)})"

        slow_and_total = replace(self, sel=sel)
        return f"({total} - {slow_and_total._per_type(good, 'threshold_seconds')}) / {total}"

    def objective(self) -> str:
        return self._constant("target", float)  # type: ignore[arg-type]

    def error_budget(self) -> str:
        return f"(1 - {self.objective()})"

    def burn_rate(self, window: str) -> str:
        """Error ratio over `window` / error budget: 1 spends the budget in exactly the window."""
        return f"{self.error_ratio(window)} / {self.error_budget()}"

    def period_error_ratio(self) -> str:
        """The error ratio over each agent type's own SLO window."""
        parts = [self.error_ratio(period, period=period) for period in self.periods()]
        return parts[0] if len(parts) == 1 else "(" + " or ".join(parts) + ")"

    def budget_left(self) -> str:
        """1 - the share of the window's budget spent: what `BUDGET_REMAINING` records."""
        return f"1 - {self.period_error_ratio()} / {self.error_budget()}"

    def window_days(self) -> str:
        return self._constant("window", lambda window: window_seconds(str(window)) / 86400)

    def periods(self) -> list[str]:
        """The distinct SLO windows of this kind (the default's first)."""
        return [str(value) for value, _ in self._groups("window")]

    # -- the recorded series -------------------------------------------------------------
    def recorded(self, name: str) -> str:
        """Recorded series `name` of this SLO under the alerts' fixed `job`."""
        return f'{name}{{{", ".join(self.sel.target_matchers)}, slo="{self.kind}"}}'

    def recorded_burn_rate(self, window: str) -> str:
        return f"{self.recorded(sli_error(window))} / {self.recorded(ERROR_BUDGET)}"


def burn_alert(burn_rate: Callable[[str], str], pairs: tuple[BurnRatePair, ...]) -> str:
    """The workbook's condition: for any pair, the burn rate over both its windows is
    above its factor. The value is the short window's burn rate (the `and`'s left side)."""
    conditions = []
    for pair in pairs:
        factor = q.number(pair.factor)
        conditions.append(
            f"({burn_rate(pair.short)} > {factor} and {burn_rate(pair.long)} > {factor})"
        )
    return "(" + " or ".join(conditions) + ")"


def pairs_of(severity: str) -> tuple[BurnRatePair, ...]:
    return tuple(pair for pair in BURN_RATE_PAIRS if pair.severity == severity)


@dataclass(frozen=True, slots=True)
class RecordingRule:
    record: str
    expr: str
    slo: SloKind


def recording_rules(config: MonitoringConfig) -> list[RecordingRule]:
    """Every SLO recording rule, in evaluation order (a rule reads only earlier ones)."""
    sel = q.Selector.alerts(config.namespace, config.job)
    rules: list[RecordingRule] = []
    for kind in SLO_KINDS:
        slo = SloQueries(config, kind, sel)

        def add(record: str, expr: str, kind: SloKind = kind) -> None:
            rules.append(RecordingRule(record, expr, kind))

        add(OBJECTIVE, slo.objective())
        add(ERROR_BUDGET, f"1 - {slo.recorded(OBJECTIVE)}")
        add(TIME_PERIOD, slo.window_days())
        for window in ALERT_WINDOWS:
            add(sli_error(window), slo.error_ratio(window))
        periods = slo.periods()
        for period in periods:
            if period not in ALERT_WINDOWS:  # a 3d window is recorded for every type already
                add(sli_error(period), slo.error_ratio(period, period=period))
        add(CURRENT_BURN, slo.recorded_burn_rate(ALERT_WINDOWS[0]))
        in_window = " or ".join(slo.recorded(sli_error(period)) for period in periods)
        in_window = in_window if len(periods) == 1 else f"({in_window})"
        add(PERIOD_BURN, f"{in_window} / {slo.recorded(ERROR_BUDGET)}")
        add(BUDGET_REMAINING, f"1 - {slo.recorded(PERIOD_BURN)}")
    return rules
