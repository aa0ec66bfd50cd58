"""The exporter's configuration: one frozen dataclass, from flags and environment.

Precedence: command-line flag, then environment variable, then default. Every value is
checked when the process starts; a bad one raises ConfigurationError naming the flag or
variable it came from. The Redis password is never part of repr(), logs or errors.
Variables: REDIS_URL, EXPORTER_* (an unknown one is refused), and the queue's own
QUEUE_PREFIX and QUEUE_LATENCY_BUCKETS (the other QUEUE_* variables are the workers').
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from types import MappingProxyType
from typing import Any

from platform_common.jobs.env import (
    LATENCY_BUCKETS_VARIABLE,
    QUEUE_PREFIX_VARIABLE,
    Setting,
    parse_choice,
    parse_duration,
    parse_int,
    parse_latency_buckets,
    parse_list,
    parse_name,
    parse_text,
    read_namespace,
    read_variable,
    setting,
    settings_of,
    written,
)
from platform_common.jobs.errors import ConfigurationError
from platform_common.jobs.keys import DEFAULT_LATENCY_BUCKETS, QUEUE_PREFIX
from platform_common.jobs.metric_catalogue import MAX_FAIR_KEY_TOP
from platform_common.jobs.redis.url import DEFAULT_REDIS_URL, RedisSettings
from platform_common.jobs.type_registry import MAX_AGENT_TYPES

__all__ = [
    "DEPRECATED_VARIABLES",
    "ENVIRONMENT_VARIABLES",
    "ENV_PREFIX",
    "MAX_HEARTBEAT_WINDOW_SECONDS",
    "MAX_REDIS_TIMEOUT_SECONDS",
    "OPTIONS",
    "ExporterSettings",
    "build_parser",
    "default_text",
]

ENV_PREFIX = "EXPORTER_"
_NAMESPACE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


def _redis(value: str, name: str) -> RedisSettings:
    return RedisSettings.from_url(value, setting_name=name)


MAX_HEARTBEAT_WINDOW_SECONDS = 86_400.0
"""A day: far past any heartbeat interval, and the window in ms stays an exact integer."""
MAX_REDIS_TIMEOUT_SECONDS = 300.0
"""Five minutes: above any Prometheus scrape timeout, and a socket timeout the OS takes."""

_port = partial(parse_int, minimum=1, maximum=65535)
_max_agent_types = partial(parse_int, minimum=1, maximum=100_000)
_fair_key_top = partial(parse_int, minimum=0, maximum=MAX_FAIR_KEY_TOP)
_heartbeat_window = partial(parse_duration, maximum=MAX_HEARTBEAT_WINDOW_SECONDS)
_redis_timeout = partial(parse_duration, maximum=MAX_REDIS_TIMEOUT_SECONDS)
_log_level = partial(parse_choice, choices=_LOG_LEVELS)


def _agent_types(value: str, name: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(parse_list(value, name, parse_name)))  # deduplicated, in order


def _namespace(value: str, name: str) -> str:
    if not _NAMESPACE.fullmatch(value):
        raise ConfigurationError(name, f"{value!r} must match [a-zA-Z_][a-zA-Z0-9_]*")
    return value


@dataclass(frozen=True, slots=True)
class ExporterSettings:
    """Everything the exporter needs; build it with `from_args()` or `from_env()`. Each
    field is declared once with its flag, variable and help (`--help` adds the default);
    the queue's key prefix and latency buckets take the queue's own variables and
    parsers, so the exporter and the queue cannot disagree."""

    # One statement per setting, its help on the lines after (ruff would give every
    # argument a line of its own).
    # fmt: off
    redis: RedisSettings = setting(  # noqa: RUF009 (a field: frozen, built once)
        RedisSettings(), _redis, flag="--redis-url", variable="REDIS_URL",
        help="redis:// or rediss:// URL (user:password@, ?ssl_ca_certs=, ?password_file=)")
    host: str = setting(  # in a pod, Prometheus scrapes the pod IP
        "0.0.0.0", parse_text, flag="--host", variable="EXPORTER_HOST",
        help="address to listen on")
    port: int = setting(
        9808, _port, flag="--port", variable="EXPORTER_PORT",
        help="port to listen on")
    agent_types: tuple[str, ...] = setting(
        (), _agent_types, flag="--agent-types", variable="EXPORTER_AGENT_TYPES",
        help="comma-separated agent types always exported, even before their first job; "
        "discovered ones are added after them")
    max_agent_types: int = setting(
        MAX_AGENT_TYPES, _max_agent_types, flag="--max-agent-types",
        variable="EXPORTER_MAX_AGENT_TYPES",
        help="cap on exported agent types; the overflow is counted, not exported")
    namespace: str = setting(
        "", _namespace, flag="--namespace", variable="EXPORTER_NAMESPACE",
        help="prefix for every metric name, e.g. 'myteam' -> myteam_queue_depth")
    queue_prefix: str = setting(
        QUEUE_PREFIX, parse_name, flag="--queue-prefix", variable=QUEUE_PREFIX_VARIABLE,
        deprecated_variable="EXPORTER_QUEUE_PREFIX",
        help="Redis key prefix of the queues")
    heartbeat_window: float = setting(
        30.0, _heartbeat_window, flag="--heartbeat-window",
        variable="EXPORTER_HEARTBEAT_WINDOW_SECONDS",
        help="a worker counts as active if its heartbeat is newer than this many seconds "
        "(about three heartbeat intervals of the workers), at most 1 day")
    redis_timeout: float = setting(
        2.0, _redis_timeout, flag="--redis-timeout", variable="EXPORTER_REDIS_TIMEOUT_SECONDS",
        help="upper bound in seconds of one scrape's Redis read (connect included), at most "
        "300; then redis_up is 0")
    latency_buckets: tuple[float, ...] = setting(
        DEFAULT_LATENCY_BUCKETS, parse_latency_buckets, flag="--latency-buckets",
        variable=LATENCY_BUCKETS_VARIABLE, deprecated_variable="EXPORTER_LATENCY_BUCKETS",
        help="the queue's latency bucket bounds, comma-separated seconds, so that empty "
        "buckets are exported as 0")
    fair_key_top: int = setting(
        0, _fair_key_top, flag="--fair-key-top", variable="EXPORTER_FAIR_KEY_TOP",
        help="publish queue_fair_key_backlog{fair_key} for this many fairness keys with the "
        f"largest backlog per agent type, at most {MAX_FAIR_KEY_TOP}; 0 = none (a label "
        "per tenant, which may name a customer)")
    log_level: str = setting(
        "info", _log_level, flag="--log-level", variable="EXPORTER_LOG_LEVEL",
        help="critical..debug")
    # fmt: on

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ExporterSettings:
        return cls.from_args([], env)

    @classmethod
    def from_args(
        cls, argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None
    ) -> ExporterSettings:
        """Flags in `argv` win over `env` (default: os.environ), which wins over defaults.

        An unknown EXPORTER_* variable is an error naming it; a blank variable is unset."""
        environment = os.environ if env is None else env
        read_namespace(environment, ENV_PREFIX, _NAMESPACE_VARIABLES)
        parsed = vars(build_parser().parse_args(list(argv or [])))
        values: dict[str, Any] = {"redis": _redis(DEFAULT_REDIS_URL, "REDIS_URL")}
        sources: dict[str, str] = {}  # attribute -> the flag or variable it came from
        for name, option in OPTIONS.items():
            if parsed.get(name) is not None:
                raw, source = str(parsed[name]), _flag(option)
            else:
                found = _from_environment(option, environment)
                if found is None:
                    continue
                raw, source = found
            values[name] = option.parse(raw, source)
            sources[name] = source
        settings = cls(**values)
        if len(settings.agent_types) > settings.max_agent_types:
            raise ConfigurationError(
                sources.get("max_agent_types", "EXPORTER_MAX_AGENT_TYPES"),
                f"{settings.max_agent_types} is fewer than the "
                f"{len(settings.agent_types)} configured agent types",
            )
        return settings

    @property
    def heartbeat_window_ms(self) -> int:
        return int(self.heartbeat_window * 1000)


def _flag(option: Setting) -> str:
    assert option.flag is not None, "every exporter setting has a flag"
    return option.flag


def _variable(option: Setting) -> str:
    assert option.variable is not None, "every exporter setting names its variable"
    return option.variable


OPTIONS: Mapping[str, Setting] = MappingProxyType(settings_of(ExporterSettings))
"""Field name -> its flag, variable, parser and help: every setting of the exporter."""
ENVIRONMENT_VARIABLES = tuple(_variable(option) for option in OPTIONS.values())
"""Every variable the exporter reads (deploy manifests are checked against it)."""
DEPRECATED_VARIABLES = {
    o.deprecated_variable: _variable(o) for o in OPTIONS.values() if o.deprecated_variable
}
"""Former name -> current name; still read, for existing deployments."""
_NAMESPACE_VARIABLES = frozenset(
    name for name in (*ENVIRONMENT_VARIABLES, *DEPRECATED_VARIABLES) if name.startswith(ENV_PREFIX)
)


def default_text(name: str) -> str:
    """The default of setting `name` as its variable would be written ("" for none)."""
    if name == "redis":
        return DEFAULT_REDIS_URL
    return written(getattr(_DEFAULTS, name))


def build_parser() -> argparse.ArgumentParser:
    # argparse, not the CLI's typer: the `exporter` extra installs no typer (an exporter
    # needs nothing of the operator CLI; typer and rich are six packages, 16 MB), and the
    # flags are derived from the settings' declarations anyway.
    parser = argparse.ArgumentParser(
        prog="queue-exporter",
        description="Prometheus exporter for platform_common.jobs queues (metrics on scrape).",
        epilog="Every flag also reads an environment variable, named in its help.",
    )
    for name, option in OPTIONS.items():
        default = default_text(name) or "none"
        parser.add_argument(
            _flag(option),
            dest=name,
            default=None,
            help=f"{option.help} (default {default}) [{_variable(option)}]",
        )
    return parser


def _from_environment(option: Setting, env: Mapping[str, str]) -> tuple[str, str] | None:
    """(value, variable) of the option's variable, else of its former name, else None."""
    variable, former_name = _variable(option), option.deprecated_variable
    current = read_variable(env, variable)
    if former_name is None:
        return None if current is None else (current, variable)
    former = read_variable(env, former_name)
    if current is not None and former is not None and current != former:
        raise ConfigurationError(
            former_name, f"former name of {variable}, which is set to another value; remove it"
        )
    if current is not None:
        return current, variable
    return None if former is None else (former, former_name)


_DEFAULTS = ExporterSettings()
