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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from platform_common.jobs.env import (
    LATENCY_BUCKETS_VARIABLE,
    QUEUE_PREFIX_VARIABLE,
    parse_choice,
    parse_duration,
    parse_int,
    parse_latency_buckets,
    parse_list,
    parse_name,
    parse_text,
    read_namespace,
    read_variable,
)
from platform_common.jobs.errors import ConfigurationError
from platform_common.jobs.keys import DEFAULT_LATENCY_BUCKETS, QUEUE_PREFIX
from platform_common.jobs.redis.url import RedisSettings

__all__ = [
    "DEPRECATED_VARIABLES",
    "ENVIRONMENT_VARIABLES",
    "ENV_PREFIX",
    "MAX_HEARTBEAT_WINDOW_SECONDS",
    "MAX_REDIS_TIMEOUT_SECONDS",
    "ExporterSettings",
    "build_parser",
]

ENV_PREFIX = "EXPORTER_"
DEFAULT_REDIS_URL = "redis://localhost:6379/0"
_NAMESPACE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


def _redis(value: str, name: str) -> RedisSettings:
    return RedisSettings.from_url(value, setting_name=name)


def _port(value: str, name: str) -> int:
    return parse_int(value, name, minimum=1, maximum=65535)


MAX_HEARTBEAT_WINDOW_SECONDS = 86_400.0
"""A day: far past any heartbeat interval, and small enough that the window in
milliseconds stays an exact integer (1e308 s was accepted, then every scrape failed)."""
MAX_REDIS_TIMEOUT_SECONDS = 300.0
"""Five minutes: above any Prometheus scrape timeout, and a socket timeout the OS takes."""


def _heartbeat_window(value: str, name: str) -> float:
    return parse_duration(value, name, maximum=MAX_HEARTBEAT_WINDOW_SECONDS)


def _redis_timeout(value: str, name: str) -> float:
    return parse_duration(value, name, maximum=MAX_REDIS_TIMEOUT_SECONDS)


def _max_agent_types(value: str, name: str) -> int:
    return parse_int(value, name, minimum=1, maximum=100_000)


def _agent_types(value: str, name: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(parse_list(value, name, parse_name)))  # deduplicated, in order


def _namespace(value: str, name: str) -> str:
    if not _NAMESPACE.fullmatch(value):
        raise ConfigurationError(name, f"{value!r} must match [a-zA-Z_][a-zA-Z0-9_]*")
    return value


def _log_level(value: str, name: str) -> str:
    return parse_choice(value, name, _LOG_LEVELS)


@dataclass(frozen=True, slots=True)
class _Option:
    attribute: str
    flag: str
    env: str
    help: str
    parse: Callable[[str, str], Any]
    """(raw value, the flag or variable it came from) -> the field's value."""
    deprecated_env: str | None = None
    """A former name of `env`, still read when `env` is not set."""


# One row per setting: the dataclass field, its flag, its environment variable. The
# queue's key prefix and latency buckets are the queue's own variables (QUEUE_PREFIX,
# QUEUE_LATENCY_BUCKETS) and parsers, so the exporter and the queue cannot disagree.
_OPTIONS = (
    _Option("redis", "--redis-url", "REDIS_URL",
            "redis:// or rediss:// URL (user:password@, ?ssl_ca_certs=, ?password_file=)",
            _redis),
    _Option("host", "--host", "EXPORTER_HOST", "address to listen on (default 0.0.0.0)",
            parse_text),
    _Option("port", "--port", "EXPORTER_PORT", "port to listen on (default 9808)", _port),
    _Option("agent_types", "--agent-types", "EXPORTER_AGENT_TYPES",
            "comma-separated agent types always exported (discovered ones are added)",
            _agent_types),
    _Option("max_agent_types", "--max-agent-types", "EXPORTER_MAX_AGENT_TYPES",
            "cap on exported agent types; the overflow is counted, not exported (default 200)",
            _max_agent_types),
    _Option("namespace", "--namespace", "EXPORTER_NAMESPACE",
            "prefix for every metric name, e.g. 'myteam' -> myteam_queue_depth (default none)",
            _namespace),
    _Option("queue_prefix", "--queue-prefix", QUEUE_PREFIX_VARIABLE,
            f"Redis key prefix of the queues (default {QUEUE_PREFIX!r})",
            parse_name, deprecated_env="EXPORTER_QUEUE_PREFIX"),
    _Option("heartbeat_window", "--heartbeat-window", "EXPORTER_HEARTBEAT_WINDOW_SECONDS",
            "a worker counts as active if its heartbeat is newer than this (default 30, "
            "at most 1 day)",
            _heartbeat_window),
    _Option("redis_timeout", "--redis-timeout", "EXPORTER_REDIS_TIMEOUT_SECONDS",
            "upper bound of one scrape's Redis read; then redis_up is 0 (default 2, at most "
            "300)",
            _redis_timeout),
    _Option("latency_buckets", "--latency-buckets", LATENCY_BUCKETS_VARIABLE,
            "the queue's latency bucket bounds, comma-separated seconds (default: the queue's)",
            parse_latency_buckets, deprecated_env="EXPORTER_LATENCY_BUCKETS"),
    _Option("log_level", "--log-level", "EXPORTER_LOG_LEVEL", "critical..debug (default info)",
            _log_level),
)  # fmt: skip

ENVIRONMENT_VARIABLES = tuple(option.env for option in _OPTIONS)
"""Every variable the exporter reads (deploy manifests are checked against it)."""
DEPRECATED_VARIABLES = {o.deprecated_env: o.env for o in _OPTIONS if o.deprecated_env}
"""Former name -> current name; still read, for existing deployments."""
_NAMESPACE_VARIABLES = frozenset(
    name for name in (*ENVIRONMENT_VARIABLES, *DEPRECATED_VARIABLES) if name.startswith(ENV_PREFIX)
)


@dataclass(frozen=True, slots=True)
class ExporterSettings:
    """Everything the exporter needs; build it with `from_args()` or `from_env()`."""

    redis: RedisSettings = field(default_factory=RedisSettings)
    """Parsed REDIS_URL (password kept out of repr)."""
    host: str = "0.0.0.0"  # in a pod, Prometheus scrapes the pod IP
    port: int = 9808
    agent_types: tuple[str, ...] = ()
    """Always exported, even before their first job (in this order, before discovered ones)."""
    max_agent_types: int = 200
    """At most this many agent types are exported; more are counted as dropped."""
    namespace: str = ""
    queue_prefix: str = QUEUE_PREFIX
    """The queue's QUEUE_PREFIX: read from that variable, checked by the queue's rule."""
    heartbeat_window: float = 30.0
    """Seconds; about three heartbeat intervals of the workers."""
    redis_timeout: float = 2.0
    """Seconds; bounds connect + read of one scrape, so a dead Redis answers fast."""
    latency_buckets: tuple[float, ...] = DEFAULT_LATENCY_BUCKETS
    """The queue's QUEUE_LATENCY_BUCKETS (same variable, same check), so that empty
    buckets are exported as 0."""
    log_level: str = "info"

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
        for option in _OPTIONS:
            if parsed.get(option.attribute) is not None:
                raw, source = str(parsed[option.attribute]), option.flag
            else:
                found = _from_environment(option, environment)
                if found is None:
                    continue
                raw, source = found
            values[option.attribute] = option.parse(raw, source)
            sources[option.attribute] = source
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="queue-exporter",
        description="Prometheus exporter for platform_common.jobs queues (metrics on scrape).",
        epilog="Every flag also reads an environment variable, named in its help.",
    )
    for option in _OPTIONS:
        parser.add_argument(
            option.flag, dest=option.attribute, default=None, help=f"{option.help} [{option.env}]"
        )
    return parser


def _from_environment(option: _Option, env: Mapping[str, str]) -> tuple[str, str] | None:
    """(value, variable) of the option's variable, else of its former name, else None."""
    current = read_variable(env, option.env)
    if option.deprecated_env is None:
        return None if current is None else (current, option.env)
    former = read_variable(env, option.deprecated_env)
    if current is not None and former is not None and current != former:
        raise ConfigurationError(
            option.deprecated_env,
            f"former name of {option.env}, which is set to another value; remove it",
        )
    if current is not None:
        return current, option.env
    return None if former is None else (former, option.deprecated_env)
