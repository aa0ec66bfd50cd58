"""`slo`: each agent type's SLOs, error budget left and burn rate, from Prometheus."""

from __future__ import annotations

import asyncio
import sys
from typing import Annotated

import typer
from rich.table import Table

from ..operations.prometheus import PrometheusSource, PrometheusUnavailable
from ..operations.slo_status import LONG_WINDOW, SloStatus, read_slos
from .exits import EXIT_FAILURE, EXIT_USAGE, PROMETHEUS_URL_ENV, CliError
from .info_command import PrometheusUrlOption
from .operator_output import (
    NONE,
    Output,
    OutputOption,
    help_text,
    jsonable,
    print_json,
    stdout,
    text,
)

__all__ = ["HELP", "slo"]


def slo(
    types: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="TYPE",
            help="Agent types (default: every one Prometheus has SLOs of).",
            show_default=False,
        ),
    ] = None,
    prometheus_url: PrometheusUrlOption = None,
    job: Annotated[
        str | None,
        typer.Option(
            "--job",
            help="Only this exporter scrape job (Prometheus' `job` label).",
            show_default=False,
        ),
    ] = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """Per agent type and SLO (availability, latency): the objective and its window, the
    SLI over the window, the share of the error budget left, and the burn rate over 1h
    and 5m (1 spends the budget in exactly the window; the page fires at 14.4 over both
    1h and 5m).

    Read with one query from the Prometheus that scrapes the exporter (--prometheus-url
    or AGENTJOBS_PROMETHEUS_URL) and loads the generated rule file
    (alerts/prometheus/queue-alerts.rules.yml), whose recording rules hold these numbers.
    Exit status 1 when Prometheus cannot be read or has no SLO recordings, 2 without a
    Prometheus URL. A value without traffic in its window is shown as "—" (null in JSON).
    """
    if prometheus_url is None:
        raise CliError(
            f"`slo` reads Prometheus: give --prometheus-url or {PROMETHEUS_URL_ENV}", EXIT_USAGE
        )
    try:
        source = PrometheusSource(prometheus_url)
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    try:
        found = asyncio.run(read_slos(source, types or [], job))
    except PrometheusUnavailable as exc:
        raise CliError(f"Prometheus at {source.url} failed: {exc}", EXIT_FAILURE) from None
    missing = sorted(set(types or []) - {status.agent_type for status in found})
    if missing:
        print(f"note: no SLO recordings of {', '.join(missing)}", file=sys.stderr)
    if output == Output.JSON:
        print_json({"prometheus": source.url, "slos": [jsonable(s) for s in found]})
    else:
        stdout().print(_table(found))


HELP = help_text(slo.__doc__)


def _percent(value: float | None) -> str:
    return NONE if value is None else f"{value * 100:.2f}%"


def _times(value: float | None) -> str:
    return NONE if value is None else f"{value:.2f}x"


def _table(found: list[SloStatus]) -> Table:
    jobs = {status.job for status in found}
    table = Table(
        caption=f"SLI and budget over each SLO's window. Burn rate: 1x spends the budget in "
        f"exactly the window; the page fires at 14.4x over both {LONG_WINDOW} and 5m.",
        caption_justify="left",
    )
    if len(jobs) > 1:
        table.add_column("JOB", no_wrap=True)
    table.add_column("TYPE", no_wrap=True)
    table.add_column("SLO", no_wrap=True)
    for name in ("OBJECTIVE", "WINDOW", "SLI", "BUDGET LEFT", f"BURN {LONG_WINDOW}", "BURN 5m"):
        table.add_column(name, justify="right")
    for status in found:
        window = NONE if status.window_days is None else f"{status.window_days:g}d"
        table.add_row(
            *([text(status.job)] if len(jobs) > 1 else []),
            text(status.agent_type),
            text(status.slo),
            _percent(status.objective),
            window,
            _percent(status.sli),
            _percent(status.budget_left),
            _times(status.burn_rate_1h),
            _times(status.burn_rate_5m),
        )
    return table
