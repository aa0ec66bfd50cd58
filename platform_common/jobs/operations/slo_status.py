"""Each agent type's service-level objectives as the Prometheus rule file records them:
the SLI over the SLO's window, the error budget left and how fast it burns.

The generated rule file (alerts/prometheus/queue-alerts.rules.yml, group
`platform-common-jobs-slo`) records every number under sloth's names, labelled `job`,
`agent_type` and `slo`; one instant query reads them all (`read_slos`). Without that
rule file loaded Prometheus has none of them: `NoSloRecordings` says so. The names
are the monitoring generator's (a test keeps them equal: the core never imports it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .prometheus import PrometheusSource, PrometheusUnavailable, result_of, sample

__all__ = [
    "BUDGET_REMAINING",
    "CURRENT_BURN",
    "ERROR_BUDGET",
    "LONG_WINDOW",
    "OBJECTIVE",
    "PERIOD_BURN",
    "SLI_ERROR_LONG",
    "TIME_PERIOD",
    "NoSloRecordings",
    "SloStatus",
    "parse_slos",
    "read_slos",
    "slo_query",
]

OBJECTIVE = "slo:objective:ratio"
ERROR_BUDGET = "slo:error_budget:ratio"
TIME_PERIOD = "slo:time_period:days"
CURRENT_BURN = "slo:current_burn_rate:ratio"
PERIOD_BURN = "slo:period_burn_rate:ratio"
BUDGET_REMAINING = "slo:period_error_budget_remaining:ratio"
LONG_WINDOW = "1h"
"""The burn rate shown beside the current (5m) one: the fast page's long window."""
SLI_ERROR_LONG = f"slo:sli_error:ratio_rate{LONG_WINDOW}"
_READ = (OBJECTIVE, ERROR_BUDGET, TIME_PERIOD, CURRENT_BURN, PERIOD_BURN, BUDGET_REMAINING,
         SLI_ERROR_LONG)  # fmt: skip


class NoSloRecordings(PrometheusUnavailable):
    """Prometheus answered, without any SLO recording: the rule file is not loaded (or
    the `job`/agent types asked for have none)."""


@dataclass(frozen=True, slots=True)
class SloStatus:
    """One SLO of one agent type (of one exporter `job`). None: not known (no traffic
    in the window gives no ratio)."""

    job: str
    agent_type: str
    slo: str
    """availability or latency."""
    objective: float | None
    window_days: float | None
    sli: float | None
    """Good events / all events over the window."""
    budget_left: float | None
    """The share of the window's error budget left (1 none spent, below 0 overspent)."""
    burn_rate_1h: float | None
    """Error ratio over 1h / error budget: 1 spends the budget in exactly the window."""
    burn_rate_5m: float | None
    """The same over 5m: how fast it burns now."""


def slo_query(agent_types: Sequence[str], job: str | None) -> str:
    """One selector of every recording read, for `agent_types` (all when empty)."""
    names = "|".join(_READ)  # letters, digits, '_' and ':': nothing a regex reads
    matchers = [f'__name__=~"{names}"']
    if job is not None:
        matchers.append(f'job="{_quoted(job)}"')
    if agent_types:
        # Agent types are [a-z0-9_.-]: only '.' is a regex operator.
        alternatives = "|".join(name.replace(".", "\\\\.") for name in sorted(set(agent_types)))
        matchers.append(f'agent_type=~"{alternatives}"')
    return "{" + ", ".join(matchers) + "}"


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


async def read_slos(
    source: PrometheusSource, agent_types: Sequence[str] = (), job: str | None = None
) -> list[SloStatus]:
    """Every SLO of `agent_types` (all when empty), sorted by job, type and SLO."""
    body = await source.fetch("/api/v1/query", {"query": slo_query(agent_types, job)})
    found = parse_slos(body)
    if not found:
        raise NoSloRecordings(
            f"no SLO recordings ({OBJECTIVE}...) there: load the generated rule file "
            "alerts/prometheus/queue-alerts.rules.yml into it"
        )
    return found


def parse_slos(body: bytes) -> list[SloStatus]:
    """The instant-query answer of `slo_query` as one SloStatus per (job, type, SLO)."""
    values: dict[tuple[str, str, str], dict[str, float | None]] = {}
    for series in result_of(body, "vector"):
        labels = series.get("metric") if isinstance(series, dict) else None
        if not isinstance(labels, dict):
            raise PrometheusUnavailable("a series of the answer has no labels")
        job, agent_type, slo, name = (
            labels.get(label) for label in ("job", "agent_type", "slo", "__name__")
        )
        if not (
            isinstance(job, str)
            and isinstance(agent_type, str)
            and isinstance(slo, str)
            and name in _READ
        ):
            continue
        point = sample(series.get("value"))
        values.setdefault((job, agent_type, slo), {})[str(name)] = (
            None if point is None else point[1]
        )
    return [_status(key, found) for key, found in sorted(values.items())]


def _status(key: tuple[str, str, str], found: dict[str, float | None]) -> SloStatus:
    budget = found.get(ERROR_BUDGET)
    period_burn = found.get(PERIOD_BURN)
    long_error = found.get(SLI_ERROR_LONG)
    sli = None if period_burn is None or budget is None else 1 - period_burn * budget
    burn_1h = None if long_error is None or not budget else long_error / budget
    return SloStatus(
        *key,
        objective=found.get(OBJECTIVE),
        window_days=found.get(TIME_PERIOD),
        sli=sli,
        budget_left=found.get(BUDGET_REMAINING),
        burn_rate_1h=burn_1h,
        burn_rate_5m=found.get(CURRENT_BURN),
    )
