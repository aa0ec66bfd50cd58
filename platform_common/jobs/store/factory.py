"""make_job_store(): the backend named by JOB_STORE_URL, configured from the environment.

The environment is read in `StoreConfig.from_env()` only, when called, never at import.

    JOB_STORE_URL                 unset/"" or memory:// -> InMemoryJobStore
                                  redis://, rediss:// (TLS), redis+sentinel://,
                                  rediss+sentinel://     -> RedisJobStore
                                  (?max_connections= and ?pool_timeout= size its pool)
    OTEL_SERVICE_NAME             the agent namespace (lower-cased; default "default-agent")
    JOBSTATE_TIME_INDEX_WRITES    creates and deletes maintain the per-owner time index
                                  (default off)
    JOBSTATE_TIME_INDEX_READS     list_for_owner reads it (default off; needs writes on,
                                  and a verified backfill: see time_index.py)
    JOBSTATE_TIME_INDEX_ENABLED   the former single switch: both of the above
    JOBSTATE_LIST_SCAN_CAP        records the legacy listing scan reads (default 5000)

JOB_STORE_* and JOBSTATE_* belong to this package: any other variable of those
namespaces is refused. OTEL_* is OpenTelemetry's and is left alone.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider

from ..env import read_namespace, read_variable
from ..errors import ConfigurationError, ValidationError
from ..redis.url import RedisSettings, redact_url
from ..validation import validate_name
from .contract import DEFAULT_AGENT, BaseJobStore, StoreOptions
from .memory import InMemoryJobStore
from .redis_store import RedisJobStore
from .time_index import (
    FLAG_ENV,
    READS_ENV,
    SCAN_CAP_ENV,
    WRITES_ENV,
    index_switches,
    list_scan_cap,
)

__all__ = ["AGENT_ENV", "ENV_NAMESPACES", "URL_ENV", "StoreConfig", "make_job_store"]

logger = logging.getLogger("platform_common.jobs.store.factory")

URL_ENV = "JOB_STORE_URL"
AGENT_ENV = "OTEL_SERVICE_NAME"
_REDIS_SCHEMES = ("redis", "rediss", "redis+sentinel", "rediss+sentinel")
ENV_NAMESPACES: Mapping[str, frozenset[str]] = {
    "JOB_STORE_": frozenset({URL_ENV}),
    "JOBSTATE_": frozenset({FLAG_ENV, WRITES_ENV, READS_ENV, SCAN_CAP_ENV}),
}
"""The namespaces the store owns -> every variable of each it reads (the rest are refused)."""


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """Everything make_job_store() needs, parsed and checked."""

    url: str
    agent: str
    agent_from_env: bool
    index_writes: bool
    index_reads: bool
    list_scan_cap: int

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> StoreConfig:
        env = os.environ if environ is None else environ
        store_variables = read_namespace(env, "JOB_STORE_", ENV_NAMESPACES["JOB_STORE_"])
        index_variables = read_namespace(env, "JOBSTATE_", ENV_NAMESPACES["JOBSTATE_"])
        raw_agent = (read_variable(env, AGENT_ENV) or "").strip()
        agent = raw_agent.lower() or DEFAULT_AGENT
        try:
            validate_name(agent, AGENT_ENV)
        except ValidationError as exc:
            raise ConfigurationError(AGENT_ENV, exc.problem) from None
        switches = index_switches(index_variables)
        return cls(
            url=store_variables.get(URL_ENV, "").strip(),
            agent=agent,
            agent_from_env=bool(raw_agent),
            index_writes=switches.writes,
            index_reads=switches.reads,
            list_scan_cap=list_scan_cap(index_variables),
        )


def make_job_store(
    url: str | None = None,
    *,
    agent: str | None = None,
    environ: Mapping[str, str] | None = None,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
) -> BaseJobStore:
    """The store JOB_STORE_URL names (or `url`), for agent OTEL_SERVICE_NAME (or `agent`).

    A bad URL, scheme or setting raises ConfigurationError naming the variable, with
    any password redacted. Nothing connects here: the Redis pool is created lazily on
    first use, so this is safe at module import (as in the migration recipe).
    """
    config = StoreConfig.from_env(environ)
    url = config.url if url is None else url.strip()
    if agent is not None:
        agent = validate_name(agent, "agent")
    common: StoreOptions = {
        "agent": agent or config.agent,
        "index_writes": config.index_writes,
        "index_reads": config.index_reads,
        "list_scan_cap": config.list_scan_cap,
        "tracer_provider": tracer_provider,
        "meter_provider": meter_provider,
    }
    try:
        scheme = urlsplit(url).scheme.lower() if url else "memory"
    except ValueError:
        raise ConfigurationError(URL_ENV, f"malformed URL {redact_url(url)!r}") from None
    if scheme == "memory":
        if url and url.rstrip("/") not in ("memory:", "memory:/"):
            raise ConfigurationError(URL_ENV, f"memory:// takes no host, path or options: {url!r}")
        if not url:
            _warn_memory_fallback()
        return InMemoryJobStore(**common)
    if scheme in _REDIS_SCHEMES:
        settings = RedisSettings.from_url(url, setting_name=URL_ENV)
        if agent is None and not config.agent_from_env:
            logger.warning(
                "%s is not set: JobStore keys use the agent name %r; set it so two "
                "agents sharing this Redis never collide",
                AGENT_ENV,
                DEFAULT_AGENT,
            )
        return RedisJobStore(settings, **common)
    raise ConfigurationError(
        URL_ENV,
        f"unknown scheme {scheme!r} in {redact_url(url)!r}: use memory://, redis://, rediss://"
        " or redis+sentinel://",
    )


_warned_memory_fallback = False


def _warn_memory_fallback() -> None:
    """Once per process: an unset JOB_STORE_URL is never a silent choice."""
    global _warned_memory_fallback
    if not _warned_memory_fallback:
        _warned_memory_fallback = True
        logger.warning(
            "%s is not set: jobs are kept in this process's memory only (lost on restart, "
            "not shared between replicas); set %s=redis://... for a shared store, or "
            "memory:// to choose this on purpose",
            URL_ENV,
            URL_ENV,
        )
