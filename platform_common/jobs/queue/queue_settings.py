"""QueueSettings: every knob of the queue, producer and worker, in one frozen dataclass."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from types import MappingProxyType
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from ..env import (
    Setting,
    check_int,
    check_latency_buckets,
    check_positive,
    parse_duration,
    parse_float,
    parse_int,
    parse_list,
    parse_text,
    read_namespace,
    read_variable,
    setting,
    settings_of,
)
from ..errors import ConfigurationError, ValidationError
from ..keys import DEFAULT_LATENCY_BUCKETS, QUEUE_PREFIX
from ..redis.url import DEFAULT_REDIS_URL, RedisSettings
from ..validation import MAX_TTL_SECONDS, validate_name

__all__ = ["DEFAULT_AGENT_TYPES", "ENV_PREFIX", "ENV_SETTINGS", "ENV_VARIABLES", "QueueSettings"]

DEFAULT_AGENT_TYPES: tuple[str, ...] = ("dining", "experiences", "transportation", "flights", "dmc")
ENV_PREFIX = "QUEUE_"
URL_VARIABLE = "QUEUE_REDIS_URL"
FALLBACK_URL_VARIABLE = "REDIS_URL"
# The pool belongs to the Redis settings (RedisSettings.make_client builds it); these
# queue settings set it (QueueSettings properties, not fields): queue name ->
# (RedisSettings field, which is also its URL option; how QUEUE_<NAME> sets it).
_POOL_SETTINGS = {
    "pool_max": ("max_connections", Setting(
        parse_int,
        "Most pooled connections per process (blocking commands use their own): the Redis "
        "settings' max_connections, the one pool size of the package.",
    )),
    "pool_timeout": ("pool_timeout", Setting(
        parse_duration, "Seconds a caller waits for a free pooled connection, then BackendBusy."
    )),
}  # fmt: skip
MAX_DEAD_LETTERS = 10_000_000
"""Bound of dead_letter_max: beyond it one list alone would hold gigabytes."""
MAX_INTERVAL_SECONDS = 86_400.0
"""Bound of every lease, interval and timeout: a day. Larger values are typos (a
duration in milliseconds, say) that would leave a worker silent or a job stuck."""
MAX_BACKOFF_SECONDS = float(MAX_TTL_SECONDS)
"""Bound of backoff_base and backoff_max: no wait outlives the longest job TTL."""
MAX_BACKOFF_FACTOR = 100.0
MAX_ATTEMPTS = 1_000
MAX_BATCH = 100_000
"""Bound of cleanup_batch and fetch_batch: one script call's work stays bounded."""
MAX_PAYLOAD_BYTES = 64 << 20
"""Bound of max_payload_bytes and max_result_bytes: 64 MiB, far below Redis' 512 MB bulk
limit."""
MAX_POOL = 10_000
MAX_PROGRESS_BYTES = 1 << 20
"""Bound of max_progress_bytes: a report is rewritten and published up to ten times a
second per job, so it stays small."""


def _redis_settings(url: str, variable: str) -> RedisSettings:
    return RedisSettings.from_url(url, setting_name=variable)


def _parse_latency_buckets(raw: str, variable: str) -> tuple[float, ...]:
    # Syntax only: order and range are checked on the field, as for a keyword argument.
    return parse_list(raw, variable, parse_duration)


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """How the queue behaves. Build with `from_url()` or `from_env()`; every value is
    checked at construction and a bad one raises ConfigurationError naming it.

    Each field is read from QUEUE_<NAME> (`redis` from QUEUE_REDIS_URL, see from_env);
    its `help` is its meaning in the docs' settings table."""

    # One statement per setting, its help on the lines after (ruff would give every
    # argument a line of its own).
    # fmt: off
    # Its socket_timeout must exceed block_timeout; its max_connections is pool_max.
    redis: RedisSettings = setting(  # noqa: RUF009 (a field: frozen, built once)
        RedisSettings(), _redis_settings, variable=URL_VARIABLE,
        help="The queue's Redis (producers, workers, `agentjobs`): `redis://`, `rediss://` "
        "(TLS), `redis+sentinel://`, `?cluster=true`; `?max_connections=` and "
        "`?pool_timeout=` are the pool's (see `QUEUE_POOL_MAX`, `QUEUE_POOL_TIMEOUT`).")
    agent_types: tuple[str, ...] = setting(DEFAULT_AGENT_TYPES, parse_list,
        "The agent types a payload may name; one queue each.")
    prefix: str = setting(QUEUE_PREFIX, parse_text,
        "First segment of every queue key (see keys.py).")
    max_attempts: int = setting(3, parse_int,
        "Attempts per job, crashes included; the last failure dead-letters it.")
    backoff_base: float = setting(1.0, parse_duration,
        "Wait before the 2nd attempt, seconds; then times backoff_factor per attempt.")
    backoff_factor: float = setting(2.0, parse_float,  # a ratio, not a duration
        "Multiplier of the wait per further attempt (>= 1); the wait before attempt n+1 is "
        "backoff_base x factor^(n-1), at most backoff_max.")
    backoff_max: float = setting(300.0, parse_duration,
        "Longest wait between attempts, seconds.")
    lease_seconds: float = setting(10.0, parse_duration,
        "How long a claim holds a job without renewal; renewed every third of it.")
    reaper_interval: float = setting(5.0, parse_duration,
        "How often each worker looks for expired leases. A job of a killed worker runs again "
        "within lease_seconds + reaper_interval (+ its backoff).")
    promote_interval: float = setting(0.25, parse_duration,
        "How often each worker moves due retries from the delayed set to the queue.")
    heartbeat_interval: float = setting(5.0, parse_duration,
        "How often a worker records that it is alive (jobs:{type}:workers).")
    block_timeout: float = setting(1.0, parse_duration,
        "How long one BLMOVE waits for a job before the worker looks around again.")
    cleanup_interval: float = setting(30.0, parse_duration,
        "How often each worker expires jobs past their TTL.")
    cleanup_batch: int = setting(100, parse_int,
        "The most jobs one cleanup run expires (bounded work per run).")
    fetch_batch: int = setting(50, parse_int,
        "The most jobs one fetch moves and claims at once (bounded by free slots).")
    max_payload_bytes: int = setting(64 * 1024, parse_int,
        "Largest encoded payload enqueue accepts.")
    max_result_bytes: int = setting(1 << 20, parse_int,
        "Largest encoded result a worker stores; a handler returning more fails its job for "
        "good (not retried: the same result would come back), error class ResultTooLarge.")
    max_progress_bytes: int = setting(16 * 1024, parse_int,
        "Largest encoded progress report a handler may make (`report_progress`); a larger "
        "one raises InvalidProgress in the handler, nothing stored.")
    progress_interval: float = setting(0.1, parse_duration,
        "Shortest time between two stored progress reports of one job, seconds: a report "
        "made sooner is held, the last one held is stored when the interval has passed.")
    pool_min: int = setting(5, parse_int,
        "Connections opened (pre-warmed) when a queue client connects. The pool's size and "
        "wait are the Redis settings' (see `pool_max`, `pool_timeout`).")
    latency_buckets: tuple[float, ...] = setting(DEFAULT_LATENCY_BUCKETS, _parse_latency_buckets,
        "Upper bounds (seconds) of the enqueue->completion histogram.")
    shutdown_timeout: float = setting(30.0, parse_duration,
        "On SIGTERM, how long running jobs may finish before they are given back.")
    dead_letter_retention: float = setting(14 * 86_400.0, parse_duration,
        "How long a job that ended for good unsuccessfully (dead-lettered, or failed by a "
        "non-retryable error) keeps its record and result, seconds (whole, rounded up; never "
        "less than the job's own TTL). Redis then drops both; the cleanup prunes its entry.")
    dead_letter_max: int = setting(10_000, parse_int,
        "Most jobs the dead-letter list and the failed list each keep per agent type; the "
        "cleanup prunes the oldest beyond it, record and result included.")
    # fmt: on

    def __post_init__(self) -> None:
        try:
            for name in self.agent_types:
                validate_name(name, "agent_types")
            validate_name(self.prefix, "prefix")
        except ValidationError as exc:
            raise ConfigurationError(exc.field, exc.problem) from None
        if not self.agent_types:
            raise ConfigurationError("agent_types", "must name at least one agent type")
        if len(set(self.agent_types)) != len(self.agent_types):
            raise ConfigurationError("agent_types", "names an agent type twice")
        # Every setting has an upper bound too: a huge value is a typo that would pass
        # startup and then write exponent notation or wait forever (issue: 1e300 s).
        check_int("max_attempts", self.max_attempts, minimum=1, maximum=MAX_ATTEMPTS)
        for name in ("cleanup_batch", "fetch_batch"):
            check_int(name, getattr(self, name), minimum=1, maximum=MAX_BATCH)
        for name in ("max_payload_bytes", "max_result_bytes"):
            check_int(name, getattr(self, name), minimum=1, maximum=MAX_PAYLOAD_BYTES)
        check_int(
            "max_progress_bytes", self.max_progress_bytes, minimum=2, maximum=MAX_PROGRESS_BYTES
        )
        check_positive("progress_interval", self.progress_interval, maximum=MAX_INTERVAL_SECONDS)
        check_int("dead_letter_max", self.dead_letter_max, minimum=1, maximum=MAX_DEAD_LETTERS)
        check_positive("dead_letter_retention", self.dead_letter_retention)
        if not 1 <= self.dead_letter_retention <= MAX_TTL_SECONDS:
            raise ConfigurationError(
                "dead_letter_retention",
                f"must be between 1 and {MAX_TTL_SECONDS} s, got {self.dead_letter_retention!r}",
            )
        check_int("pool_min", self.pool_min, minimum=0, maximum=MAX_POOL)
        check_int("pool_max", self.pool_max, minimum=1, maximum=MAX_POOL)
        check_positive("pool_timeout", self.pool_timeout, maximum=MAX_INTERVAL_SECONDS)
        if self.pool_min > self.pool_max:
            raise ConfigurationError("pool_min", f"{self.pool_min} exceeds pool_max")
        for name in (
            "lease_seconds", "reaper_interval", "promote_interval", "heartbeat_interval",
            "block_timeout", "cleanup_interval", "shutdown_timeout",
        ):  # fmt: skip
            check_positive(name, getattr(self, name), maximum=MAX_INTERVAL_SECONDS)
        for name in ("backoff_base", "backoff_max"):
            check_positive(name, getattr(self, name), maximum=MAX_BACKOFF_SECONDS)
        check_positive("backoff_factor", self.backoff_factor, maximum=MAX_BACKOFF_FACTOR)
        if self.backoff_factor < 1:
            raise ConfigurationError("backoff_factor", "must be >= 1")
        check_latency_buckets("latency_buckets", self.latency_buckets)
        if self.redis.socket_timeout <= self.block_timeout:
            # A socket timeout under the block timeout would kill every idle BLMOVE.
            raise ConfigurationError(
                "block_timeout",
                f"{self.block_timeout} s must be below the Redis socket timeout "
                f"({self.redis.socket_timeout} s)",
            )

    @property
    def pool_max(self) -> int:
        """The Redis settings' max_connections (see _POOL_SETTINGS)."""
        return self.redis.max_connections

    @property
    def pool_timeout(self) -> float:
        """The Redis settings' pool_timeout (see _POOL_SETTINGS)."""
        return self.redis.pool_timeout

    @classmethod
    def from_url(cls, url: str, **overrides: Any) -> QueueSettings:
        """Settings for the Redis at `url`; keyword arguments override the defaults
        (`pool_max` and `pool_timeout` override the URL's max_connections/pool_timeout)."""
        pool = _pool_overrides(overrides)
        return cls(redis=RedisSettings.from_url(url, **pool), **overrides)

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        redis_url: str | None = None,
        redis_url_setting: str = "--redis-url",
    ) -> QueueSettings:
        """Settings from QUEUE_* variables (see ENV_VARIABLES and docs/operations.md).

        Redis: `redis_url` (e.g. a command-line flag, named `redis_url_setting` in
        errors), else QUEUE_REDIS_URL, else REDIS_URL, else redis://localhost:6379/0.
        An unknown QUEUE_* variable is an error naming it. A blank variable is unset."""
        env = os.environ if environ is None else environ
        variables = read_namespace(env, ENV_PREFIX, ENV_VARIABLES)
        url_setting = redis_url_setting
        if redis_url is None:
            url_setting = URL_VARIABLE if URL_VARIABLE in variables else FALLBACK_URL_VARIABLE
            redis_url = read_variable(env, url_setting) or DEFAULT_REDIS_URL
        values: dict[str, Any] = {}
        for variable, raw in variables.items():
            name, declared = ENV_SETTINGS[variable]
            if name != "redis":
                values[name] = declared.parse(raw, variable)
        from_environment = set(values)
        redis_settings = _redis_settings(redis_url, url_setting)
        url_options = {key for key, _ in parse_qsl(urlsplit(redis_url).query)}
        for name in sorted(_POOL_NAMES & from_environment):
            option, value = _POOL_SETTINGS[name][0], values.pop(name)
            if option in url_options and getattr(redis_settings, option) != value:
                raise ConfigurationError(
                    _variable_of(name),
                    f"{value} conflicts with ?{option}= of {url_setting}; set only one",
                )
            redis_settings = replace(redis_settings, **{option: value})
        try:
            return cls(redis=redis_settings, **values)
        except ConfigurationError as exc:
            if exc.setting not in from_environment:
                raise
            # The error keeps naming the setting; the message adds the variable it came from.
            raise ConfigurationError(
                exc.setting, f"{exc.problem} (from {_variable_of(exc.setting)})"
            ) from None

    def with_overrides(self, **overrides: Any) -> QueueSettings:
        """A copy with `overrides`; `pool_max`/`pool_timeout` change the Redis settings'
        pool (a `redis=` override brings its own pool unless they are given too)."""
        pool = _pool_overrides(overrides)
        if pool:
            overrides["redis"] = replace(overrides.get("redis", self.redis), **pool)
        return replace(self, **overrides)

    def retention_seconds(self) -> int:
        """dead_letter_retention as the scripts take it: whole seconds, rounded up."""
        return math.ceil(self.dead_letter_retention)

    def backoff_ms(self) -> tuple[int, float, int]:
        """(base ms, factor, max ms) as the scripts take them."""
        return int(self.backoff_base * 1000), self.backoff_factor, int(self.backoff_max * 1000)


def _variable_of(name: str) -> str:
    return ENV_PREFIX + name.upper()


_FIELD_NAMES = frozenset(f.name for f in fields(QueueSettings))
_POOL_NAMES = frozenset(_POOL_SETTINGS)
_DECLARED = settings_of(QueueSettings) | {
    name: declared for name, (_, declared) in _POOL_SETTINGS.items()
}
ENV_SETTINGS: Mapping[str, tuple[str, Setting]] = MappingProxyType(
    {
        declared.variable or _variable_of(name): (name, declared)
        for name, declared in _DECLARED.items()
    }
)
"""Every QUEUE_* variable from_env() reads -> (the setting it sets, its Setting)."""
ENV_VARIABLES: frozenset[str] = frozenset(ENV_SETTINGS)
"""Every QUEUE_* variable from_env() reads; any other QUEUE_* name is refused."""


def _pool_overrides(overrides: dict[str, Any]) -> dict[str, Any]:
    """Take `pool_max`/`pool_timeout` out of `overrides`, as the Redis settings' options;
    ConfigurationError naming the first setting that is none of the queue's."""
    unknown = sorted(set(overrides) - _FIELD_NAMES - _POOL_NAMES)
    if unknown:
        raise ConfigurationError(unknown[0], "unknown queue setting")
    return {_POOL_SETTINGS[name][0]: overrides.pop(name) for name in _POOL_NAMES & set(overrides)}
