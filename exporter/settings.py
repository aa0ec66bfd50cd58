"""The exporter's configuration: one frozen dataclass, from flags and environment.

Precedence: command-line flag, then environment variable, then default. Every value is
checked when the process starts; a bad one raises ConfigurationError naming the flag or
variable it came from. The Redis password is never part of repr(), logs or errors.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from platform_common.jobs.errors import ConfigurationError, ValidationError
from platform_common.jobs.keys import DEFAULT_LATENCY_BUCKETS, QUEUE_PREFIX
from platform_common.jobs.redis.url import RedisSettings
from platform_common.jobs.validation import validate_name

__all__ = ["ENVIRONMENT_VARIABLES", "ExporterSettings", "build_parser"]

_NAMESPACE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


@dataclass(frozen=True, slots=True)
class _Option:
    attribute: str
    flag: str
    env: str
    help: str


# One row per setting: the dataclass field, its flag, its environment variable.
_OPTIONS = (
    _Option("redis_url", "--redis-url", "REDIS_URL",
            "redis:// or rediss:// URL (user:password@, ?ssl_ca_certs=, ?password_file=)"),
    _Option("host", "--host", "EXPORTER_HOST", "address to listen on (default 0.0.0.0)"),
    _Option("port", "--port", "EXPORTER_PORT", "port to listen on (default 9808)"),
    _Option("agent_types", "--agent-types", "EXPORTER_AGENT_TYPES",
            "comma-separated agent types always exported (discovered ones are added)"),
    _Option("max_agent_types", "--max-agent-types", "EXPORTER_MAX_AGENT_TYPES",
            "cap on exported agent types; the overflow is counted, not exported (default 200)"),
    _Option("namespace", "--namespace", "EXPORTER_NAMESPACE",
            "prefix for every metric name, e.g. 'myteam' -> myteam_queue_depth (default none)"),
    _Option("queue_prefix", "--queue-prefix", "EXPORTER_QUEUE_PREFIX",
            "Redis key prefix of the queues (default 'jobs')"),
    _Option("heartbeat_window", "--heartbeat-window", "EXPORTER_HEARTBEAT_WINDOW_SECONDS",
            "a worker counts as active if its heartbeat is newer than this (default 30)"),
    _Option("redis_timeout", "--redis-timeout", "EXPORTER_REDIS_TIMEOUT_SECONDS",
            "upper bound of one scrape's Redis read; then redis_up is 0 (default 2)"),
    _Option("latency_buckets", "--latency-buckets", "EXPORTER_LATENCY_BUCKETS",
            "the queue's latency bucket bounds, comma-separated seconds (default: the queue's)"),
    _Option("log_level", "--log-level", "EXPORTER_LOG_LEVEL", "critical..debug (default info)"),
)  # fmt: skip

ENVIRONMENT_VARIABLES = tuple(option.env for option in _OPTIONS)
"""Every variable the exporter reads (deploy manifests are checked against it)."""


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
    heartbeat_window: float = 30.0
    """Seconds; about three heartbeat intervals of the workers."""
    redis_timeout: float = 2.0
    """Seconds; bounds connect + read of one scrape, so a dead Redis answers fast."""
    latency_buckets: tuple[float, ...] = DEFAULT_LATENCY_BUCKETS
    """Must match the queue's buckets so that empty buckets are exported as 0."""
    log_level: str = "info"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ExporterSettings:
        return cls.from_args([], env)

    @classmethod
    def from_args(
        cls, argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None
    ) -> ExporterSettings:
        """Flags in `argv` win over `env` (default: os.environ), which wins over defaults."""
        environment = os.environ if env is None else env
        parsed = vars(build_parser().parse_args(list(argv or [])))
        raw: dict[str, tuple[str, str]] = {}  # attribute -> (value, where it came from)
        for option in _OPTIONS:
            if parsed.get(option.attribute) is not None:
                raw[option.attribute] = (str(parsed[option.attribute]), option.flag)
            elif environment.get(option.env, "") != "":
                raw[option.attribute] = (environment[option.env], option.env)
        return cls._from_raw(raw)

    @classmethod
    def _from_raw(cls, raw: Mapping[str, tuple[str, str]]) -> ExporterSettings:
        values: dict[str, Any] = {}
        url, source = raw.get("redis_url", ("redis://localhost:6379/0", "REDIS_URL"))
        values["redis"] = RedisSettings.from_url(url, setting_name=source)
        if "host" in raw:
            values["host"] = _non_empty(*raw["host"])
        if "port" in raw:
            values["port"] = _integer(*raw["port"], low=1, high=65535)
        if "agent_types" in raw:
            values["agent_types"] = _agent_types(*raw["agent_types"])
        if "max_agent_types" in raw:
            values["max_agent_types"] = _integer(*raw["max_agent_types"], low=1, high=100_000)
        if "namespace" in raw:
            values["namespace"] = _namespace(*raw["namespace"])
        if "queue_prefix" in raw:
            values["queue_prefix"] = _queue_prefix(*raw["queue_prefix"])
        if "heartbeat_window" in raw:
            values["heartbeat_window"] = _seconds(*raw["heartbeat_window"])
        if "redis_timeout" in raw:
            values["redis_timeout"] = _seconds(*raw["redis_timeout"])
        if "latency_buckets" in raw:
            values["latency_buckets"] = _buckets(*raw["latency_buckets"])
        if "log_level" in raw:
            values["log_level"] = _log_level(*raw["log_level"])
        settings = cls(**values)
        if len(settings.agent_types) > settings.max_agent_types:
            name = raw.get("max_agent_types", ("", "EXPORTER_MAX_AGENT_TYPES"))[1]
            raise ConfigurationError(
                name,
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


def _non_empty(value: str, name: str) -> str:
    if not value.strip():
        raise ConfigurationError(name, "must not be empty")
    return value.strip()


def _integer(value: str, name: str, *, low: int, high: int) -> int:
    try:
        number = int(value)
    except ValueError:
        raise ConfigurationError(name, f"must be an integer, got {value!r}") from None
    if not low <= number <= high:
        raise ConfigurationError(name, f"must be between {low} and {high}, got {number}")
    return number


def _seconds(value: str, name: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise ConfigurationError(name, f"must be a number of seconds, got {value!r}") from None
    if not math.isfinite(number) or number <= 0:
        raise ConfigurationError(name, f"must be a positive number of seconds, got {value!r}")
    return number


def _buckets(value: str, name: str) -> tuple[float, ...]:
    bounds = tuple(_seconds(part.strip(), name) for part in value.split(",") if part.strip())
    if not bounds or list(bounds) != sorted(set(bounds)):
        raise ConfigurationError(name, f"must be ascending positive seconds, got {value!r}")
    return bounds


def _agent_types(value: str, name: str) -> tuple[str, ...]:
    names: list[str] = []
    for part in value.split(","):
        if not part.strip():
            continue
        try:
            agent_type = validate_name(part.strip(), name)
        except ValidationError as exc:
            raise ConfigurationError(name, exc.problem) from None
        if agent_type not in names:
            names.append(agent_type)
    return tuple(names)


def _namespace(value: str, name: str) -> str:
    if not _NAMESPACE.fullmatch(value):
        raise ConfigurationError(name, f"{value!r} must match [a-zA-Z_][a-zA-Z0-9_]*")
    return value


def _queue_prefix(value: str, name: str) -> str:
    if not value or any(c in value for c in "{}*?[] \n"):
        raise ConfigurationError(name, f"{value!r} is not a usable Redis key prefix")
    return value


def _log_level(value: str, name: str) -> str:
    if value.lower() not in _LOG_LEVELS:
        raise ConfigurationError(name, f"must be one of {', '.join(_LOG_LEVELS)}, got {value!r}")
    return value.lower()
