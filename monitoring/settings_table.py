"""The README's settings table, rendered from the settings declarations (never by hand).

Rows come from what the code reads: the queue's and the exporter's declared settings
(platform_common.jobs.env.setting), the JobStore's variables and the CLI's, defaults
included; rendering fails when a variable of a strict namespace has no row or no meaning.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from platform_common.jobs.cli.exits import DEBUG_ENV, PROMETHEUS_URL_ENV
from platform_common.jobs.env import written
from platform_common.jobs.queue.queue_settings import (
    ENV_SETTINGS,
    ENV_VARIABLES,
    FALLBACK_URL_VARIABLE,
    URL_VARIABLE,
    QueueSettings,
)
from platform_common.jobs.redis.url import DEFAULT_REDIS_URL
from platform_common.jobs.store.factory import AGENT_ENV, ENV_NAMESPACES, URL_ENV, StoreConfig
from platform_common.jobs.store.time_index import FLAG_ENV, READS_ENV, SCAN_CAP_ENV, WRITES_ENV
from platform_common.jobs_exporter.settings import (
    DEPRECATED_VARIABLES,
    ENVIRONMENT_VARIABLES,
    OPTIONS,
    default_text,
)

__all__ = ["SettingRow", "render_settings_table", "setting_rows"]

_HEADER = "| variable | read by | default | meaning |\n|---|---|---|---|\n"

# Meanings of the variables read by plain functions (no declared setting carries them).
# Rendering fails when a variable has no meaning.
_EXTRA_MEANINGS = {
    URL_ENV: "Unset or `memory://`: an in-process store (one process only); `redis://`, "
    "`rediss://` (TLS), `redis+sentinel://`, `?cluster=true`: Redis "
    "(`?max_connections=` and `?pool_timeout=` size its pool).",
    AGENT_ENV: "The agent namespace of the JobStore's keys (`agentjobs:{agent}:<job_id>`), "
    "lower-cased; shared with OpenTelemetry, which reads it too.",
    WRITES_ENV: "Creates and deletes maintain the per-owner time index. Turn it on first, "
    "on every agent, then run `agentjobs backfill`.",
    READS_ENV: "`list_for_owner` reads the time index (O(limit) pages); needs "
    f"`{WRITES_ENV}`. Turn it on only after `agentjobs backfill --verify` exits 0 (before "
    "that, listings would miss older jobs).",
    FLAG_ENV: f"The former single switch, kept: `true` is `{WRITES_ENV}` and `{READS_ENV}` "
    "together (only for a store already backfilled and verified); not combined with them.",
    SCAN_CAP_ENV: "Records the legacy listing scan reads when the time index is off or fails.",
    DEBUG_ENV: "Add the traceback to a failing command's one line (as `--debug`).",
    PROMETHEUS_URL_ENV: "The Prometheus scraping the exporter, e.g. `http://prometheus:9090`: "
    "`info` reads its window's counts from it, `console` the overview's chart (unset: "
    "both read the history the workers record in Redis); the flag `--prometheus-url` wins.",
}


@dataclass(frozen=True, slots=True)
class SettingRow:
    variable: str
    read_by: tuple[str, ...]
    default: str
    """As the variable would be written (so it parses to the default), or a phrase."""
    meaning: str


def setting_rows() -> list[SettingRow]:
    """Every variable, queue first, then JobStore, exporter, CLI; one row per variable."""
    rows: dict[str, SettingRow] = {}
    for row in (*_queue_rows(), *_store_rows(), *_exporter_rows(), *_cli_rows()):
        known = rows.get(row.variable)
        if known is None:
            rows[row.variable] = row
        else:  # read by both (QUEUE_PREFIX, QUEUE_LATENCY_BUCKETS): the first meaning
            rows[row.variable] = SettingRow(
                row.variable, known.read_by + row.read_by, known.default, known.meaning
            )
    strict = ENV_VARIABLES | set(DEPRECATED_VARIABLES) | set(ENVIRONMENT_VARIABLES)
    strict |= {name for names in ENV_NAMESPACES.values() for name in names}
    missing = sorted(strict - set(rows))
    if missing:
        raise ValueError(f"settings table: no row for {', '.join(missing)}")
    return list(rows.values())


def render_settings_table() -> str:
    """A markdown table of every setting, newline-terminated."""
    return _HEADER + "".join(_line(row) for row in setting_rows())


def _line(row: SettingRow) -> str:
    meaning = row.meaning.replace("|", "\\|")
    return f"| `{row.variable}` | {', '.join(row.read_by)} | {row.default} | {meaning} |\n"


def _queue_rows() -> Iterator[SettingRow]:
    defaults = QueueSettings()
    for variable, (name, declared) in ENV_SETTINGS.items():
        if variable == URL_VARIABLE:
            default = f"`{FALLBACK_URL_VARIABLE}`, else `{DEFAULT_REDIS_URL}`"
        else:
            default = _value(getattr(defaults, name))
        yield SettingRow(variable, ("queue",), default, _meaning(variable, declared.help))


def _store_rows() -> Iterator[SettingRow]:
    defaults = StoreConfig.from_env({})
    values = {
        URL_ENV: "unset (memory)",
        AGENT_ENV: _value(defaults.agent),
        WRITES_ENV: _value(defaults.index_writes),
        READS_ENV: _value(defaults.index_reads),
        FLAG_ENV: "unset",
        SCAN_CAP_ENV: _value(defaults.list_scan_cap),
    }
    for variable, default in values.items():
        yield SettingRow(variable, ("JobStore",), default, _meaning(variable, None))


def _exporter_rows() -> Iterator[SettingRow]:
    for name, option in OPTIONS.items():
        variable = option.variable or ""
        meaning = f"{option.help}; the flag `{option.flag}` wins."
        if variable == FALLBACK_URL_VARIABLE:
            meaning += f" The queue reads it when `{URL_VARIABLE}` is unset."
        yield SettingRow(variable, ("exporter",), _text(default_text(name)), meaning)
        if option.deprecated_variable is not None:
            yield SettingRow(
                option.deprecated_variable,
                ("exporter",),
                "unset",
                f"Deprecated former name of `{variable}`, still read; set to another "
                f"value than `{variable}`, it is an error.",
            )


def _cli_rows() -> Iterator[SettingRow]:
    yield SettingRow(DEBUG_ENV, ("agentjobs",), _value(False), _meaning(DEBUG_ENV, None))
    yield SettingRow(
        PROMETHEUS_URL_ENV, ("agentjobs",), "unset", _meaning(PROMETHEUS_URL_ENV, None)
    )


def _meaning(variable: str, docstring: str | None) -> str:
    text = docstring or _EXTRA_MEANINGS.get(variable)
    if not text:
        raise ValueError(f"settings table: {variable} has no docstring or meaning")
    return " ".join(text.split())


def _value(value: object) -> str:
    return _text(written(value))


def _text(written: str) -> str:
    """A default as the table shows it: the written value in backticks, or "unset"."""
    return f"`{written}`" if written else "unset"
