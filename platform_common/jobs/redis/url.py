"""Redis connection settings and client construction, shared by store, queue and exporter.

One URL says everything: `redis://` or `rediss://` (TLS), user and password in the
URL (ACL), `?ssl_ca_certs=`, `?ssl_certfile=` / `?ssl_keyfile=` (client certificate),
`?password_file=` (read at start, so the secret stays out of the URL), and
`?cluster=true` for Redis Cluster (several `host:port,host:port` startup nodes allowed),
`?max_connections=` (pool size, default 20) and `?pool_timeout=` (seconds a caller waits
for a free pooled connection before BackendBusy, default 5).
Sentinel: `redis+sentinel://[user:pass@]host:port[,host:port...]/service_name[/db]`
(`rediss+sentinel://` for TLS; `?sentinel_password_file=` when the sentinels require
a password of their own). `redacted_url()` is the only form that may be logged.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import ExponentialBackoff

from ..env import parse_bool, parse_duration, parse_int
from ..errors import ConfigurationError
from .clients import (
    AnyNodeConnection,
    AnyNodeSSLConnection,
    ClusterClient,
    FastConnection,
    FastSSLConnection,
    MasterConnection,
    MasterSSLConnection,
    SentinelMasterClient,
)
from .pool import WaitingConnectionPool, WaitingSentinelPool

__all__ = [
    "DEFAULT_REDIS_URL",
    "ClusterClient",
    "RedisClient",
    "RedisSettings",
    "SentinelMasterClient",
    "async_retry",
    "redact_url",
]

RedisClient = aioredis.Redis | RedisCluster

_SCHEMES = ("redis", "rediss")
# scheme -> TLS on?
_SENTINEL_SCHEMES = {"redis+sentinel": False, "rediss+sentinel": True}
DEFAULT_PORT = 6379
DEFAULT_SENTINEL_PORT = 26379
DEFAULT_REDIS_URL = f"redis://localhost:{DEFAULT_PORT}/0"
"""The Redis of a process given no URL (the queue, the exporter): the default RedisSettings."""
# Sentinel master names are configuration words; anything else is a typo or an attack.
_SERVICE_NAME = re.compile(r"[A-Za-z0-9._-]{1,128}")
# Connection options that also apply to the sentinels themselves (never the data
# nodes' credentials: sentinels have their own, see `sentinel_password`).
_SENTINEL_SHARED_KWARGS = ("socket_timeout", "socket_connect_timeout", "retry", "ssl",
                           "ssl_ca_certs", "ssl_certfile", "ssl_keyfile")  # fmt: skip


def redact_url(url: str) -> str:
    """The URL with any password replaced by '***' (safe for logs and errors)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    if parts.password is None:
        return url
    user = parts.username or ""
    # Everything after the last '@' is host:port[,host:port...]; parts.port would
    # raise on a multi-host (sentinel, cluster) netloc.
    hosts = parts.netloc.rpartition("@")[2]
    return parts._replace(netloc=f"{user}:***@{hosts}").geturl()


@dataclass(frozen=True, slots=True)
class RedisSettings:
    """How to reach Redis. Build it with `from_url()`; never log `password`."""

    host: str = "localhost"
    port: int = DEFAULT_PORT
    db: int = 0
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: bool = False
    ssl_ca_certs: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    cluster: bool = False
    # Every host:port of the URL, `host`/`port` being the first: the cluster's startup
    # nodes or the sentinels. Empty when the settings were built by hand.
    addresses: tuple[tuple[str, int], ...] = ()
    # Set for redis+sentinel:// URLs: the master name the sentinels monitor.
    sentinel_service: str | None = None
    sentinel_password: str | None = field(default=None, repr=False)
    socket_timeout: float = 5.0
    connect_timeout: float = 5.0
    max_connections: int = 20
    pool_timeout: float = 5.0
    setting_name: str = "REDIS_URL"

    @classmethod
    def from_url(
        cls, url: str, *, setting_name: str = "REDIS_URL", **overrides: Any
    ) -> RedisSettings:
        """Parse a redis://, rediss:// or redis+sentinel:// URL; a bad one raises
        ConfigurationError naming `setting_name` (and never echoing the password)."""
        safe = redact_url(url)
        try:
            parts = urlsplit(url)
        except ValueError as exc:
            raise ConfigurationError(setting_name, f"malformed URL {safe!r}: {exc}") from None
        sentinel = parts.scheme in _SENTINEL_SCHEMES
        if parts.scheme not in _SCHEMES and not sentinel:
            raise ConfigurationError(
                setting_name,
                "scheme must be redis://, rediss://, redis+sentinel:// or "
                f"rediss+sentinel://, got {safe!r}",
            )
        username, password, addresses = _parse_netloc(
            parts.netloc,
            DEFAULT_SENTINEL_PORT if sentinel else DEFAULT_PORT,
            setting_name,
            safe,
        )
        service, db = _parse_path(parts.path, sentinel, setting_name)
        values: dict[str, Any] = {
            "host": addresses[0][0],
            "port": addresses[0][1],
            "addresses": addresses,
            "db": db,
            "username": username,
            "password": password,
            "tls": parts.scheme == "rediss" or _SENTINEL_SCHEMES.get(parts.scheme, False),
            "sentinel_service": service,
            "setting_name": setting_name,
        }
        for key, raw in parse_qsl(parts.query, keep_blank_values=True):
            if key in ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile"):
                values[key] = raw
            elif key == "password_file":
                values["password"] = _read_password_file(raw, setting_name)
            elif key == "sentinel_password_file" and sentinel:
                values["sentinel_password"] = _read_password_file(raw, setting_name)
            elif key == "cluster":
                values["cluster"] = parse_bool(raw, f"{setting_name} cluster")
            elif key in ("socket_timeout", "connect_timeout", "pool_timeout"):
                values[key] = parse_duration(raw, f"{setting_name} {key}")
            elif key == "max_connections":
                values[key] = parse_int(raw, f"{setting_name} {key}", minimum=1)
            else:
                raise ConfigurationError(setting_name, f"unknown URL option {key!r}")
        values.update(overrides)
        if values.get("cluster") and db != 0:
            raise ConfigurationError(setting_name, "Redis Cluster has only database 0")
        if values.get("cluster") and sentinel:
            raise ConfigurationError(
                setting_name, "cluster=true cannot be combined with redis+sentinel://"
            )
        if len(addresses) > 1 and not (values.get("cluster") or sentinel):
            raise ConfigurationError(
                setting_name,
                f"several hosts need cluster=true or redis+sentinel://, got {safe!r}",
            )
        return cls(**values)

    def redacted_url(self) -> str:
        auth = ""
        if self.username or self.password:
            auth = quote(self.username or "") + (":***" if self.password else "") + "@"
        hosts = ",".join(f"{host}:{port}" for host, port in self.all_addresses())
        if self.sentinel_service is not None:
            scheme = "rediss+sentinel" if self.tls else "redis+sentinel"
            return f"{scheme}://{auth}{hosts}/{self.sentinel_service}/{self.db}"
        scheme = "rediss" if self.tls else "redis"
        suffix = "?cluster=true" if self.cluster else ""
        return f"{scheme}://{auth}{hosts}/{self.db}{suffix}"

    def all_addresses(self) -> tuple[tuple[str, int], ...]:
        """Every host:port to try: the URL's list, or just host:port."""
        return self.addresses or ((self.host, self.port),)

    def client_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "username": self.username,
            "password": self.password,
            "socket_timeout": self.socket_timeout,
            "socket_connect_timeout": self.connect_timeout,
            "decode_responses": True,
            "max_connections": self.max_connections,
            # A dropped connection is retried with backoff instead of surfacing at once.
            "retry": async_retry(),
            "health_check_interval": 30,
        }
        if self.tls:
            kwargs.update(
                ssl=True,
                ssl_ca_certs=self.ssl_ca_certs,
                ssl_certfile=self.ssl_certfile,
                ssl_keyfile=self.ssl_keyfile,
            )
        if not self.cluster:
            kwargs["db"] = self.db
        return kwargs

    def make_client(self, **extra: Any) -> RedisClient:
        """A new client with its own pool; the caller closes it with `aclose()`.

        The one client factory of the package (store, index, queue, exporter). Its pool
        holds at most `max_connections`; past that a caller waits up to `pool_timeout`
        for a free connection, then gets BackendBusy. `extra` overrides client options
        (e.g. a single connection for a blocking command)."""
        kwargs = self.client_kwargs() | {"pool_timeout": self.pool_timeout} | extra
        if self.sentinel_service is not None:
            return self._make_sentinel_client(kwargs)
        if self.cluster:
            kwargs.pop("health_check_interval", None)
            # The other URL hosts are extra startup nodes: a client made while the
            # first one is down (failover) still finds the cluster.
            startup = [ClusterNode(host, port) for host, port in self.all_addresses()[1:]]
            return ClusterClient(startup_nodes=startup or None, **kwargs)
        max_connections = kwargs.pop("max_connections")
        timeout = kwargs.pop("pool_timeout")
        # A pool takes the connection class (TLS or not), not ssl=True.
        kwargs["connection_class"] = (
            FastSSLConnection if kwargs.pop("ssl", False) else FastConnection
        )
        pool = WaitingConnectionPool(max_connections=max_connections, timeout=timeout, **kwargs)
        return aioredis.Redis.from_pool(pool)

    def make_node_client(self, **extra: Any) -> aioredis.Redis:
        """A client of one node, for what any node serves (SUBSCRIBE/PSUBSCRIBE: PUBLISH
        reaches every node of a cluster). On a cluster it connects to whichever URL
        address answers first, so a subscriber survives the loss of any one node;
        otherwise it is `make_client()`."""
        if not self.cluster:
            client = self.make_client(**extra)
            assert isinstance(client, aioredis.Redis)
            return client
        kwargs = self.client_kwargs() | extra
        for name in ("host", "port", "max_connections", "pool_timeout"):
            kwargs.pop(name, None)
        tls = kwargs.pop("ssl", False)
        pool = aioredis.ConnectionPool(
            connection_class=AnyNodeSSLConnection if tls else AnyNodeConnection,
            max_connections=extra.get("max_connections", self.max_connections),
            addresses=self.all_addresses(),
            **kwargs,
        )
        return aioredis.Redis.from_pool(pool)

    def _make_sentinel_client(self, kwargs: dict[str, Any]) -> RedisClient:
        assert self.sentinel_service is not None
        kwargs.pop("host")
        kwargs.pop("port")
        kwargs["timeout"] = kwargs.pop("pool_timeout")  # the waiting pool's name for it
        sentinel_kwargs = {k: kwargs[k] for k in _SENTINEL_SHARED_KWARGS if k in kwargs}
        if self.sentinel_password is not None:
            sentinel_kwargs["password"] = self.sentinel_password
        manager = Sentinel(  # type: ignore[no-untyped-call]
            list(self.all_addresses()), sentinel_kwargs=sentinel_kwargs, **kwargs
        )
        tls = kwargs.get("ssl", False)
        client: SentinelMasterClient = manager.master_for(
            self.sentinel_service,
            redis_class=SentinelMasterClient,
            connection_pool_class=WaitingSentinelPool,
            connection_class=MasterSSLConnection if tls else MasterConnection,
        )
        client.sentinel_manager = manager
        return client


def async_retry() -> Retry:
    """Reconnect and retry a command up to 3 times with backoff on a dropped connection.

    It must be redis.asyncio's Retry: the synchronous one never awaits the command
    inside its loop, so an asyncio client given it neither retries nor reconnects (a
    killed pub/sub connection then stays dead)."""
    return Retry(ExponentialBackoff(cap=2.0, base=0.05), retries=3)


def _read_password_file(path: str, setting_name: str) -> str:
    try:
        return Path(os.path.expanduser(path)).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigurationError(
            setting_name, f"cannot read password_file {path!r}: {exc.strerror}"
        ) from None


def _parse_netloc(
    netloc: str, default_port: int, setting_name: str, safe: str
) -> tuple[str | None, str | None, tuple[tuple[str, int], ...]]:
    """[user[:password]@]host[:port][,host[:port]...] -> (user, password, addresses)."""
    userinfo, at, host_list = netloc.rpartition("@")
    username = password = None
    if at:
        user, _, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) or None
    addresses = tuple(
        _split_host_port(item, default_port, setting_name, safe) for item in host_list.split(",")
    )
    return username, password, addresses


def _split_host_port(item: str, default_port: int, setting_name: str, safe: str) -> tuple[str, int]:
    if item.startswith("["):  # IPv6 literal: [::1]:6379
        host, _, rest = item[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else rest
    else:
        host, _, port_text = item.partition(":")
    if not host:
        raise ConfigurationError(setting_name, f"no host in {safe!r}")
    if not port_text:
        return host.lower(), default_port
    # No echo of the text: in a mistyped URL it may well be the password.
    if not _is_ascii_number(port_text) or not 0 < int(port_text) < 65536:
        raise ConfigurationError(setting_name, "malformed URL: port must be a number 1-65535")
    return host.lower(), int(port_text)


def _parse_path(path: str, sentinel: bool, setting_name: str) -> tuple[str | None, int]:
    """'/<db>' for redis://, '/<service>[/<db>]' for redis+sentinel:// -> (service, db)."""
    segments = [segment for segment in path.split("/") if segment]
    service = None
    if sentinel:
        if not segments:
            raise ConfigurationError(
                setting_name, "redis+sentinel:// needs the master's service name as its path"
            )
        service = unquote(segments.pop(0))
        if not _SERVICE_NAME.fullmatch(service):
            raise ConfigurationError(
                setting_name, f"sentinel service name must match [A-Za-z0-9._-]+, got {service!r}"
            )
    if len(segments) > 1:
        raise ConfigurationError(setting_name, f"unexpected path {path!r}")
    db = 0
    if segments:
        if not _is_ascii_number(segments[0]):
            raise ConfigurationError(
                setting_name, f"database must be a number, got {segments[0]!r}"
            )
        db = int(segments[0])
    return service, db


def _is_ascii_number(text: str) -> bool:
    # str.isdigit() alone accepts '²', which int() then refuses.
    return text.isascii() and text.isdigit()
