"""QueueSettings: every knob of the queue, producer and worker, in one frozen dataclass."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from ..errors import ConfigurationError, ValidationError
from ..keys import DEFAULT_LATENCY_BUCKETS, QUEUE_PREFIX
from ..redis.url import RedisSettings
from ..validation import validate_name

__all__ = ["DEFAULT_AGENT_TYPES", "ENV_PREFIX", "QueueSettings"]

DEFAULT_AGENT_TYPES: tuple[str, ...] = ("dining", "experiences", "transportation", "flights", "dmc")
ENV_PREFIX = "QUEUE_"


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """How the queue behaves. Build with `from_url()` or `from_env()`; every value is
    checked at construction and a bad one raises ConfigurationError naming it."""

    redis: RedisSettings = field(default_factory=RedisSettings)
    """Where Redis is (URL, TLS, ACL user); its socket_timeout must exceed block_timeout."""
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
    pool_min: int = 5
    """Connections opened (pre-warmed) when a queue client connects."""
    pool_max: int = 20
    """Most pooled connections per process; blocking commands use their own."""
    latency_buckets: tuple[float, ...] = DEFAULT_LATENCY_BUCKETS
    """Upper bounds (seconds) of the enqueue->completion histogram."""
    shutdown_timeout: float = 30.0
    """On SIGTERM, how long running jobs may finish before they are given back."""

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
        for name in ("max_attempts", "cleanup_batch", "fetch_batch", "max_payload_bytes"):
            _require_int(name, getattr(self, name), minimum=1)
        _require_int("pool_min", self.pool_min, minimum=0)
        _require_int("pool_max", self.pool_max, minimum=1)
        if self.pool_min > self.pool_max:
            raise ConfigurationError("pool_min", f"{self.pool_min} exceeds pool_max")
        for name in (
            "backoff_base", "backoff_max", "lease_seconds", "reaper_interval",
            "promote_interval", "heartbeat_interval", "block_timeout", "cleanup_interval",
            "shutdown_timeout",
        ):  # fmt: skip
            _require_positive(name, getattr(self, name))
        _require_positive("backoff_factor", self.backoff_factor)
        if self.backoff_factor < 1:
            raise ConfigurationError("backoff_factor", "must be >= 1")
        bounds = self.latency_buckets
        if not bounds or any(not math.isfinite(b) or b <= 0 for b in bounds):
            raise ConfigurationError("latency_buckets", "must be finite positive numbers")
        if list(bounds) != sorted(set(bounds)):
            raise ConfigurationError("latency_buckets", "must be strictly ascending")
        if self.redis.socket_timeout <= self.block_timeout:
            # A socket timeout under the block timeout would kill every idle BLMOVE.
            raise ConfigurationError(
                "block_timeout",
                f"{self.block_timeout} s must be below the Redis socket timeout "
                f"({self.redis.socket_timeout} s)",
            )

    @classmethod
    def from_url(cls, url: str, **overrides: Any) -> QueueSettings:
        """Settings for the Redis at `url`; keyword arguments override the defaults."""
        unknown = sorted(set(overrides) - _FIELD_NAMES)
        if unknown:
            raise ConfigurationError(unknown[0], "unknown queue setting")
        return cls(redis=RedisSettings.from_url(url), **overrides)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> QueueSettings:
        """Settings from QUEUE_* variables (QUEUE_REDIS_URL, else REDIS_URL, else
        redis://localhost:6379/0). An unknown QUEUE_* variable is an error."""
        env = os.environ if environ is None else environ
        url_setting = "QUEUE_REDIS_URL" if "QUEUE_REDIS_URL" in env else "REDIS_URL"
        url = env.get(url_setting, "redis://localhost:6379/0")
        values: dict[str, Any] = {}
        for key, raw in env.items():
            if not key.startswith(ENV_PREFIX) or key == "QUEUE_REDIS_URL":
                continue
            name = key[len(ENV_PREFIX) :].lower()
            if name not in _FIELD_NAMES or name == "redis":
                raise ConfigurationError(key, "unknown queue setting")
            values[name] = _parse(key, name, raw)
        redis_settings = RedisSettings.from_url(url, setting_name=url_setting)
        return cls(redis=redis_settings, **values)

    def with_overrides(self, **overrides: Any) -> QueueSettings:
        unknown = sorted(set(overrides) - _FIELD_NAMES)
        if unknown:
            raise ConfigurationError(unknown[0], "unknown queue setting")
        return replace(self, **overrides)

    def backoff_ms(self) -> tuple[int, float, int]:
        """(base ms, factor, max ms) as the scripts take them."""
        return int(self.backoff_base * 1000), self.backoff_factor, int(self.backoff_max * 1000)


_FIELD_NAMES = frozenset(f.name for f in fields(QueueSettings))
_INT_FIELDS = frozenset(
    {"max_attempts", "cleanup_batch", "fetch_batch", "max_payload_bytes", "pool_min", "pool_max"}
)


def _parse(key: str, name: str, raw: str) -> Any:
    if name == "agent_types":
        return tuple(part.strip() for part in raw.split(",") if part.strip())
    if name == "prefix":
        return raw
    try:
        if name == "latency_buckets":
            return tuple(float(part) for part in raw.split(",") if part.strip())
        if name in _INT_FIELDS:
            return int(raw)
        return float(raw)
    except ValueError:
        raise ConfigurationError(key, f"not a number: {raw!r}") from None


def _require_int(name: str, value: object, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigurationError(name, f"must be an int >= {minimum}, got {value!r}")


def _require_positive(name: str, value: object) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ConfigurationError(name, f"must be a positive number, got {value!r}")
