"""QueueSettings: every knob of the queue, producer and worker, in one frozen dataclass."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from ..env import (
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
)
from ..errors import ConfigurationError, ValidationError
from ..keys import DEFAULT_LATENCY_BUCKETS, QUEUE_PREFIX
from ..redis.url import RedisSettings
from ..validation import MAX_TTL_SECONDS, validate_name

__all__ = ["DEFAULT_AGENT_TYPES", "ENV_PREFIX", "ENV_VARIABLES", "QueueSettings"]

DEFAULT_AGENT_TYPES: tuple[str, ...] = ("dining", "experiences", "transportation", "flights", "dmc")
ENV_PREFIX = "QUEUE_"
URL_VARIABLE = "QUEUE_REDIS_URL"
FALLBACK_URL_VARIABLE = "REDIS_URL"
DEFAULT_REDIS_URL = "redis://localhost:6379/0"
# The pool belongs to the Redis settings (RedisSettings.make_client builds it); these
# queue names set it. queue name -> RedisSettings field, which is also its URL option.
_POOL_SETTINGS = {"pool_max": "max_connections", "pool_timeout": "pool_timeout"}
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


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """How the queue behaves. Build with `from_url()` or `from_env()`; every value is
    checked at construction and a bad one raises ConfigurationError naming it."""

    redis: RedisSettings = field(default_factory=RedisSettings)
    """Where Redis is (URL, TLS, ACL user) and the pool (max_connections is pool_max);
    its socket_timeout must exceed block_timeout."""
    agent_types: tuple[str, ...] = DEFAULT_AGENT_TYPES
    """The agent types a payload may name; one queue each."""
    prefix: str = QUEUE_PREFIX
    """First segment of every queue key (see keys.py)."""
    max_attempts: int = 3
    """Attempts per job, crashes included; the last failure dead-letters it."""
    backoff_base: float = 1.0
    """Wait before the 2nd attempt, seconds; then times backoff_factor per attempt."""
    backoff_factor: float = 2.0
    backoff_max: float = 300.0
    """Longest wait between attempts, seconds."""
    lease_seconds: float = 10.0
    """How long a claim holds a job without renewal; renewed every third of it."""
    reaper_interval: float = 5.0
    """How often each worker looks for expired leases. A job of a killed worker runs
    again within lease_seconds + reaper_interval (+ its backoff)."""
    promote_interval: float = 0.25
    """How often each worker moves due retries from the delayed set to the queue."""
    heartbeat_interval: float = 5.0
    """How often a worker records that it is alive (jobs:{type}:workers)."""
    block_timeout: float = 1.0
    """How long one BLMOVE waits for a job before the worker looks around again."""
    cleanup_interval: float = 30.0
    """How often each worker expires jobs past their TTL."""
    cleanup_batch: int = 100
    """The most jobs one cleanup run expires (bounded work per run)."""
    fetch_batch: int = 50
    """The most jobs one fetch moves and claims at once (bounded by free slots)."""
    max_payload_bytes: int = 64 * 1024
    """Largest encoded payload enqueue accepts."""
    max_result_bytes: int = 1 << 20
    """Largest encoded result a worker stores; a handler returning more fails its job
    for good (not retried: the same result would come back), error class
    ResultTooLarge."""
    pool_min: int = 5
    """Connections opened (pre-warmed) when a queue client connects. The pool's size
    and wait are the Redis settings' (see `pool_max`, `pool_timeout`)."""
    latency_buckets: tuple[float, ...] = DEFAULT_LATENCY_BUCKETS
    """Upper bounds (seconds) of the enqueue->completion histogram."""
    shutdown_timeout: float = 30.0
    """On SIGTERM, how long running jobs may finish before they are given back."""
    dead_letter_retention: float = 14 * 86_400.0
    """How long a job that ended for good unsuccessfully (dead-lettered, or failed by a
    non-retryable error) keeps its record and result, seconds (whole, rounded up; never
    less than the job's own TTL). Redis then drops both; the cleanup prunes its entry."""
    dead_letter_max: int = 10_000
    """Most jobs the dead-letter list and the failed list each keep per agent type; the
    cleanup prunes the oldest beyond it, record and result included."""

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
        """Most pooled connections per process (blocking commands use their own): the
        Redis settings' max_connections, the one pool size of the package."""
        return self.redis.max_connections

    @property
    def pool_timeout(self) -> float:
        """Seconds a caller waits for a free pooled connection, then BackendBusy."""
        return self.redis.pool_timeout

    @classmethod
    def from_url(cls, url: str, **overrides: Any) -> QueueSettings:
        """Settings for the Redis at `url`; keyword arguments override the defaults
        (`pool_max` and `pool_timeout` override the URL's max_connections/pool_timeout)."""
        _reject_unknown(overrides)
        pool = {_POOL_SETTINGS[name]: overrides.pop(name) for name in _POOL_NAMES & set(overrides)}
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
        values = {
            _setting_of(variable): _ENV_PARSERS[_setting_of(variable)](raw, variable)
            for variable, raw in variables.items()
            if variable != URL_VARIABLE
        }
        from_environment = set(values)
        redis_settings = RedisSettings.from_url(redis_url, setting_name=url_setting)
        url_options = {key for key, _ in parse_qsl(urlsplit(redis_url).query)}
        for name in sorted(_POOL_NAMES & from_environment):
            option, value = _POOL_SETTINGS[name], values.pop(name)
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
        _reject_unknown(overrides)
        pool = {_POOL_SETTINGS[name]: overrides.pop(name) for name in _POOL_NAMES & set(overrides)}
        if pool:
            overrides["redis"] = replace(overrides.get("redis", self.redis), **pool)
        return replace(self, **overrides)

    def retention_seconds(self) -> int:
        """dead_letter_retention as the scripts take it: whole seconds, rounded up."""
        return math.ceil(self.dead_letter_retention)

    def backoff_ms(self) -> tuple[int, float, int]:
        """(base ms, factor, max ms) as the scripts take them."""
        return int(self.backoff_base * 1000), self.backoff_factor, int(self.backoff_max * 1000)


_FIELD_NAMES = frozenset(f.name for f in fields(QueueSettings))
_POOL_NAMES = frozenset(_POOL_SETTINGS)


def _parse_latency_buckets(raw: str, variable: str) -> tuple[float, ...]:
    # Syntax only: order and range are checked on the field, as for a keyword argument.
    return parse_list(raw, variable, parse_duration)


# Setting -> parser of its QUEUE_<SETTING> variable: every field but redis (that one is
# QUEUE_REDIS_URL), plus the pool's two. Range checks stay in __post_init__.
_ENV_PARSERS: dict[str, Callable[[str, str], Any]] = {
    "agent_types": parse_list,
    "prefix": parse_text,
    "max_attempts": parse_int,
    "backoff_base": parse_duration,
    "backoff_factor": parse_float,  # a ratio, not a duration
    "backoff_max": parse_duration,
    "lease_seconds": parse_duration,
    "reaper_interval": parse_duration,
    "promote_interval": parse_duration,
    "heartbeat_interval": parse_duration,
    "block_timeout": parse_duration,
    "cleanup_interval": parse_duration,
    "cleanup_batch": parse_int,
    "fetch_batch": parse_int,
    "max_payload_bytes": parse_int,
    "max_result_bytes": parse_int,
    "pool_min": parse_int,
    "pool_max": parse_int,
    "pool_timeout": parse_duration,
    "latency_buckets": _parse_latency_buckets,
    "shutdown_timeout": parse_duration,
    "dead_letter_retention": parse_duration,
    "dead_letter_max": parse_int,
}
ENV_VARIABLES: frozenset[str] = frozenset(
    {URL_VARIABLE} | {ENV_PREFIX + name.upper() for name in _ENV_PARSERS}
)
"""Every QUEUE_* variable from_env() reads; any other QUEUE_* name is refused."""


def _setting_of(variable: str) -> str:
    return variable[len(ENV_PREFIX) :].lower()


def _variable_of(setting: str) -> str:
    return ENV_PREFIX + setting.upper()


def _reject_unknown(overrides: Mapping[str, Any]) -> None:
    unknown = sorted(set(overrides) - _FIELD_NAMES - _POOL_NAMES)
    if unknown:
        raise ConfigurationError(unknown[0], "unknown queue setting")
