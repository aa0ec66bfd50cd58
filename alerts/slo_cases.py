"""promtool cases that prove the burn-rate alerts' math: traffic stories, minute by minute.

Each case is a story of phases (how long, and at what burn rate: error ratio / error
budget, 0 healthy) told to one agent type at `TOTAL_PER_MINUTE` jobs a minute, and the
minutes at which the alert must fire or stay silent. Per alert, each of its pairs fires,
and stays silent, on its own (a burn just above and just below its factor, `MARGIN`);
then the page's short outage and reset, and the ticket's slow burn (`_stories`).

`_Story.firing_pair` is the workbook's condition computed here from the same counts (a
second, plain-Python statement of the math): generation fails if a story does not mean
what it says. Every counter starts high, so rate() extrapolates the same for all of
them, and each check reads windows inside one phase where it matters: Prometheus 2 and
3, which differ on a window's left edge, agree on these numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

from platform_common.jobs.metric_catalogue import by_key
from platform_common.jobs_monitoring.config import MonitoringConfig
from platform_common.jobs_monitoring.slo import BurnRatePair, Objective, SloKind, window_seconds
from platform_common.jobs_monitoring.slo_queries import le_text, pairs_of

from .promtool_cases import AGENT_TYPE, INSTANCE, Scenario, Series, humanize

__all__ = [
    "EVALUATION_MINUTES",
    "MARGIN",
    "TOTAL_PER_MINUTE",
    "Phase",
    "SloCase",
    "SloTest",
    "objective_of",
    "slo_cases",
]

TOTAL_PER_MINUTE = 1_000_000
"""Jobs finished a minute in every story: error ratios of 0.0001% are whole jobs."""
MARGIN = 0.05
"""'Just above' and 'just below' a pair's factor: 5% either side."""
START = 1_000_000
"""Every counter's first value: rate() then extrapolates every series alike."""
EVALUATION_MINUTES = 10
"""The stories' evaluation interval, which every check falls on. The burn-rate alerts
have no `for`, so evaluating every tenth minute decides what every minute would, and
the days-long ticket stories run in seconds."""


@dataclass(frozen=True, slots=True)
class Phase:
    minutes: int
    burn: float
    """Error ratio / error budget during the phase; 0 is healthy traffic."""


@dataclass(frozen=True, slots=True)
class SloCase:
    title: str
    phases: tuple[Phase, ...]
    checks: tuple[tuple[int, bool], ...]
    """(minute, fires?) evaluations."""
    interval: int = 1
    """Minutes between samples (the ticket stories span days: 10)."""


def _minutes(window: str) -> int:
    return window_seconds(window) // 60


class _Story:
    """The counts of one case: bad and total jobs, cumulative, at each sample."""

    def __init__(self, case: SloCase, budget: float) -> None:
        self.case = case
        self.budget = budget
        self.bad_per_minute = [_bad_per_minute(phase.burn, budget) for phase in case.phases]
        self.length = sum(phase.minutes for phase in case.phases)

    def bad_at(self, minute: int) -> int:
        """Bad jobs up to `minute` (0 before the first sample)."""
        total, start = 0, 0
        for phase, per_minute in zip(self.case.phases, self.bad_per_minute, strict=True):
            inside = min(max(minute - start, 0), phase.minutes)
            total += inside * per_minute
            start += phase.minutes
        return total

    def burn(self, minute: int, window: str) -> float:
        """The burn rate over `window` ending at `minute`, from the counts at its edges
        (a window reaching before the first sample starts there)."""
        begin = max(0, minute - _minutes(window))
        bad = self.bad_at(minute) - self.bad_at(begin)
        return bad / ((minute - begin) * TOTAL_PER_MINUTE) / self.budget

    def pure(self, minute: int, window: str) -> bool:
        """Whether `window` ending at `minute` lies inside one phase."""
        begin, start = minute - _minutes(window), 0
        for phase in self.case.phases:
            if start <= begin and minute <= start + phase.minutes:
                return True
            start += phase.minutes
        return False

    def firing_pair(self, minute: int, pairs: tuple[BurnRatePair, ...]) -> BurnRatePair | None:
        for pair in pairs:
            burns = [self.burn(minute, pair.short), self.burn(minute, pair.long)]
            for burn in burns:
                # Close to the factor, a window's edge (which Prometheus 2 and 3 treat
                # differently) could decide: a story must stay clear of it.
                if abs(burn - pair.factor) < pair.factor * 1e-3:
                    raise ValueError(f"{self.case.title}: burn {burn} at minute {minute}")
            if all(burn > pair.factor for burn in burns):
                return pair
        return None


def _bad_per_minute(burn: float, budget: float) -> int:
    """Bad jobs a minute for `burn`, nudged off a humanize rounding edge so that the
    4 significant digits of the alert's value cannot depend on float noise."""
    bad = min(TOTAL_PER_MINUTE, round(burn * budget * TOTAL_PER_MINUTE))
    while bad and bad < TOTAL_PER_MINUTE:
        value = bad / TOTAL_PER_MINUTE / budget
        if humanize(value * (1 - 1e-9)) == humanize(value * (1 + 1e-9)):
            break
        bad += 1
    return bad


def objective_of(config: MonitoringConfig, kind: SloKind) -> Objective:
    """The objective of the stories' agent type (its override, if the site has one)."""
    return config.slo_objectives(kind).get(AGENT_TYPE, config.slo_default(kind))


def _stories(config: MonitoringConfig, kind: SloKind, severity: str) -> tuple[SloCase, ...]:
    budget = objective_of(config, kind).error_budget
    first, second = pairs_of(severity)
    above, below = 1 + MARGIN, 1 - MARGIN
    if severity == "page":
        # 14.4x over 1h and 5m: six healthy hours, so the 6h window stays under 6x.
        history = _minutes(second.long)
        quick = tuple(
            SloCase(
                f"{first.factor:g}x pair, {'just above' if fires else 'just below'}",
                (Phase(history, 0), Phase(75, first.factor * scale), Phase(15, 0)),
                # Not yet: the 1h window holds 50 minutes of it. Then its whole hour.
                # Then the reset: 5 minutes after the errors stop the 5m window is clean.
                ((history + 50, False), (history + 70, fires), (history + 80, False)),
            )
            for scale, fires in ((above, True), (below, False))
        )
        # 6x over 6h and 30m: the 6h window fills with it, below 14.4x throughout.
        steady = tuple(
            SloCase(
                f"{second.factor:g}x pair, {'just above' if fires else 'just below'}",
                (Phase(history, 0), Phase(history + 20, second.factor * scale)),
                ((history + 300, False), (2 * history + 10, fires)),
            )
            for scale, fires in ((above, True), (below, False))
        )
        # Five minutes of errors worth half of what 1h at 14.4x spends: the 5m window
        # is far above 14.4x, the 1h window never reaches it.
        outage_ratio = min(1.0, first.factor * budget / 2 * _minutes(first.long) / 5)
        outage = SloCase(
            "a short outage must not page",
            (Phase(history + 5, 0), Phase(5, outage_ratio / budget), Phase(60, 0)),
            # At its end the 5m window holds nothing else.
            tuple((history + minute, False) for minute in (10, 20, 40, 70)),
        )
        # The reset: a hard burn, then none. Ten minutes later the 1h window still holds
        # far more than 14.4x, but the 5m window is clean: the page has stopped.
        hard = min(2 * first.factor, 1 / budget)
        reset = SloCase(
            "the page stops once the errors do",
            (Phase(history, 0), Phase(70, hard), Phase(30, 0)),
            ((history + 70, True), (history + 80, False), (history + 90, False)),
        )
        return (*quick, *steady, outage, reset)
    # 3x over 1d and 2h: two healthy days first, so the 3d window stays under 1x below it.
    day, interval = _minutes(first.long), 10
    quick = tuple(
        SloCase(
            f"{first.factor:g}x pair, {'just above' if fires else 'just below'}",
            (Phase(2 * day, 0), Phase(day + 20, first.factor * scale)),
            ((2 * day + 20 * 60, False), (3 * day + 20, fires)),
            interval,
        )
        for scale, fires in ((above, True), (below, False))
    )
    three_days = _minutes(second.long)
    steady = tuple(
        SloCase(
            f"{second.factor:g}x pair, {'just above' if fires else 'just below'}",
            (Phase(three_days + 20, second.factor * scale),),
            ((three_days + 20, fires),),
            interval,
        )
        for scale, fires in ((above, True), (below, False))
    )
    # A slow leak at 2x after a healthy day: no page, no threshold alert, but once the
    # 3d window has burnt 1x (a day later) a ticket.
    slow = SloCase(
        "a slow burn must open a ticket",
        (Phase(day, 0), Phase(2 * day, 2.0)),
        ((day + 20 * 60, False), (2 * day + 4 * 60, True), (3 * day, True)),
        interval,
    )
    return (*quick, *steady, slow)


def _values(counts: list[int]) -> str:
    """promtool's expanding notation for cumulative counts, one segment per slope."""
    segments: list[str] = [str(counts[0])]
    index = 1
    while index < len(counts):
        step = counts[index] - counts[index - 1]
        end = index
        while end + 1 < len(counts) and counts[end + 1] - counts[end] == step:
            end += 1
        segments.append(f"{counts[index]}+{step}x{end - index}")
        index = end + 1
    return " ".join(segments)


def _series(config: MonitoringConfig, kind: SloKind, story: _Story) -> tuple[Series, ...]:
    minutes = range(0, story.length + 1, story.case.interval)
    bad = [story.bad_at(minute) for minute in minutes]
    total = [minute * TOTAL_PER_MINUTE for minute in minutes]

    def series(key: str, counts: list[int], suffix: str = "", **extra: str) -> Series:
        labels = {"agent_type": AGENT_TYPE, "instance": INSTANCE, "job": config.job, **extra}
        body = ", ".join(f'{name}="{value}"' for name, value in sorted(labels.items()))
        name = by_key(key).full_name(config.namespace) + suffix
        return f"{name}{{{body}}}", _values([START + count for count in counts])

    depth = series("queue_depth", [0] * len(bad))
    if kind == "availability":
        # A quarter of the errors expire, the rest fail (half of those dead-lettered:
        # counted once, in failed).
        expired = [count // 4 for count in bad]
        failed = [b - e for b, e in zip(bad, expired, strict=True)]
        return (
            depth,
            series("completed", [t - b for t, b in zip(total, bad, strict=True)]),
            series("failed", failed),
            series("dead_lettered", [count // 2 for count in failed]),
            series("expired", expired),
        )
    threshold = objective_of(config, kind).threshold_seconds
    assert threshold is not None
    bounds = config.histogram_bounds
    above = [bound for bound in bounds if bound > threshold][:1]
    good = [t - b for t, b in zip(total, bad, strict=True)]
    return (
        depth,
        series("latency", total, "_count"),
        series("latency", good, "_bucket", le=le_text(threshold)),
        # Every job is within the next bound: a rule reading another bucket sees none slow.
        *(series("latency", total, "_bucket", le=le_text(bound)) for bound in above),
        series("latency", total, "_bucket", le="+Inf"),
    )


@dataclass(frozen=True, slots=True)
class SloTest:
    case: SloCase
    series: tuple[Series, ...]
    checks: tuple[tuple[int, Scenario | None], ...]
    """(minute, what the alert carries when it fires there, or None: silent)."""


def slo_cases(config: MonitoringConfig, kind: SloKind, severity: str) -> list[SloTest]:
    """The stories of the `severity` (page or ticket) alert of SLO `kind`."""
    budget = objective_of(config, kind).error_budget
    pairs = pairs_of(severity)
    labels = {"agent_type": AGENT_TYPE, "job": config.job}
    tests = []
    for case in _stories(config, kind, severity):
        story = _Story(case, budget)
        checks: list[tuple[int, Scenario | None]] = []
        for minute, fires in case.checks:
            assert minute % case.interval == 0 and minute % EVALUATION_MINUTES == 0, case.title
            assert minute <= story.length, case.title
            pair = story.firing_pair(minute, pairs)
            if (pair is not None) != fires:
                raise ValueError(f"{case.title}: minute {minute} does not mean {fires}")
            if pair is None:
                checks.append((minute, None))
                continue
            # The alert's value is the short window's burn rate: read inside one phase.
            assert story.pure(minute, pair.short), case.title
            value = humanize(story.burn(minute, pair.short))
            checks.append((minute, Scenario((), labels, value)))
        tests.append(SloTest(case, _series(config, kind, story), tuple(checks)))
    return tests
