"""The README's settings table, rendered from the settings definitions (never by hand).

Rows come from what the code reads: the queue's QueueSettings fields (their attribute
docstrings are the meanings), the exporter's options (their help), the JobStore's
variables and the CLI's. Defaults are read from the code, so they cannot go stale, and
rendering fails when a variable of a strict namespace has no row or no meaning.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass

from platform_common.jobs.cli.exits import DEBUG_ENV, PROMETHEUS_URL_ENV
from platform_common.jobs.queue.queue_settings import (
    DEFAULT_REDIS_URL,
    ENV_VARIABLES,
    FALLBACK_URL_VARIABLE,
    URL_VARIABLE,
    QueueSettings,
)
from platform_common.jobs.store.factory import AGENT_ENV, ENV_NAMESPACES, URL_ENV, StoreConfig
from platform_common.jobs.store.time_index import FLAG_ENV, SCAN_CAP_ENV
from platform_common.jobs_exporter.settings import (
    _OPTIONS,  # the exporter's one table of options (flag, variable, help, parser)
    DEPRECATED_VARIABLES,
    ENVIRONMENT_VARIABLES,
    ExporterSettings,
)
from platform_common.jobs_exporter.settings import (
    DEFAULT_REDIS_URL as EXPORTER_DEFAULT_REDIS_URL,
)

__all__ = ["SettingRow", "render_settings_table", "setting_rows"]

_HEADER = "| variable | read by | default | meaning |\n|---|---|---|---|\n"
# The exporter's help texts carry their default ("(default 200)"); the table has a
# column for it, read from the dataclass instead.
_HELP_DEFAULT = re.compile(r"\s*\(default [^,)]*\)|(?<=\()default [^,)]*, ")

# Meanings no definition carries as text yet (a QueueSettings field without docstring,
# variables read by plain functions). Rendering fails when a variable has neither.
_EXTRA_MEANINGS = {
    URL_VARIABLE: "The queue's Redis (producers, workers, `agentjobs`): `redis://`, `rediss://` "
    "(TLS), `redis+sentinel://`, `?cluster=true`; `?max_connections=` and `?pool_timeout=` "
    "are the pool's (see `QUEUE_POOL_MAX`, `QUEUE_POOL_TIMEOUT`).",
    "QUEUE_BACKOFF_FACTOR": "Multiplier of the wait per further attempt (>= 1); the wait "
    "before attempt n+1 is backoff_base x factor^(n-1), at most backoff_max.",
    URL_ENV: "Unset or `memory://`: an in-process store (one process only); `redis://`, "
    "`rediss://` (TLS), `redis+sentinel://`, `?cluster=true`: Redis "
    "(`?max_connections=` and `?pool_timeout=` size its pool).",
    AGENT_ENV: "The agent namespace of the JobStore's keys (`agentjobs:{agent}:<job_id>`), "
    "lower-cased; shared with OpenTelemetry, which reads it too.",
    FLAG_ENV: "Maintain and read the per-owner time index (`list_for_owner`); turn it on "
    "only after a backfill.",
    SCAN_CAP_ENV: "Records the legacy listing scan reads when the time index is off or fails.",
    DEBUG_ENV: "Add the traceback to a failing command's one line (as `--debug`).",
    PROMETHEUS_URL_ENV: "The Prometheus scraping the exporter, e.g. `http://prometheus:9090`: "
    "`info` reads the last minute from it, `console` the overview's last hour; the flag "
    "`--prometheus-url` wins.",
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
    for name, docstring in _attribute_docs(QueueSettings):
        variable = URL_VARIABLE if name == "redis" else f"QUEUE_{name.upper()}"
        if variable not in ENV_VARIABLES:
            continue
        if name == "redis":
            default = f"`{FALLBACK_URL_VARIABLE}`, else `{DEFAULT_REDIS_URL}`"
        else:
            default = _value(getattr(defaults, name))
        # The URL's field documents the parsed settings object; the variable has its own text.
        text = None if name == "redis" else docstring
        yield SettingRow(variable, ("queue",), default, _meaning(variable, text))


def _store_rows() -> Iterator[SettingRow]:
    defaults = StoreConfig.from_env({})
    values = {
        URL_ENV: "unset (memory)",
        AGENT_ENV: _value(defaults.agent),
        FLAG_ENV: _value(defaults.time_index),
        SCAN_CAP_ENV: _value(defaults.list_scan_cap),
    }
    for variable, default in values.items():
        yield SettingRow(variable, ("JobStore",), default, _meaning(variable, None))


def _exporter_rows() -> Iterator[SettingRow]:
    defaults = ExporterSettings()
    for option in _OPTIONS:
        if option.attribute == "redis":
            default = f"`{EXPORTER_DEFAULT_REDIS_URL}`"
        else:
            default = _value(getattr(defaults, option.attribute))
        help_text = _HELP_DEFAULT.sub("", option.help).replace("()", "").strip()
        meaning = f"{help_text}; the flag `{option.flag}` wins."
        if option.env == FALLBACK_URL_VARIABLE:
            meaning += f" The queue reads it when `{URL_VARIABLE}` is unset."
        yield SettingRow(option.env, ("exporter",), default, meaning)
        if option.deprecated_env is not None:
            yield SettingRow(
                option.deprecated_env,
                ("exporter",),
                "unset",
                f"Deprecated former name of `{option.env}`, still read; set to another "
                f"value than `{option.env}`, it is an error.",
            )


def _cli_rows() -> Iterator[SettingRow]:
    yield SettingRow(DEBUG_ENV, ("agentjobs",), _value(False), _meaning(DEBUG_ENV, None))
    yield SettingRow(
        PROMETHEUS_URL_ENV, ("agentjobs",), "unset", _meaning(PROMETHEUS_URL_ENV, None)
    )


def _attribute_docs(cls: type) -> Iterator[tuple[str, str | None]]:
    """(name, docstring) of each field and property of `cls`, in source order."""
    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0]
    assert isinstance(body, ast.ClassDef)
    statements = body.body
    for index, statement in enumerate(statements):
        if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            following = statements[index + 1] if index + 1 < len(statements) else None
            doc = None
            if isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant):
                doc = str(following.value.value)
            yield statement.target.id, doc
        elif isinstance(statement, ast.FunctionDef) and any(
            isinstance(decorator, ast.Name) and decorator.id == "property"
            for decorator in statement.decorator_list
        ):
            yield statement.name, ast.get_docstring(statement)


def _meaning(variable: str, docstring: str | None) -> str:
    text = docstring or _EXTRA_MEANINGS.get(variable)
    if not text:
        raise ValueError(f"settings table: {variable} has no docstring or meaning")
    return " ".join(text.split())


def _value(value: object) -> str:
    """The default as the variable would be written: `1`, not `1.0`; lists comma-separated."""
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    if isinstance(value, tuple):
        return f"`{','.join(_value(item).strip('`') for item in value)}`" if value else "unset"
    if value == "":
        return "unset"
    return f"`{value}`"
