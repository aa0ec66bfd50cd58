"""Redis connection settings and client construction, shared by store, queue and exporter.

One URL says everything: `redis://` or `rediss://` (TLS), user and password in the
URL (ACL), `?ssl_ca_certs=`, `?ssl_certfile=` / `?ssl_keyfile=` (client certificate),
`?password_file=` (read at start, so the secret stays out of the URL), and
`?cluster=true` for Redis Cluster. `redacted()` is the only form that may be logged.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from .errors import ConfigurationError

__all__ = ["RedisClient", "RedisSettings", "redact_url"]

RedisClient = aioredis.Redis | RedisCluster

_SCHEMES = ("redis", "rediss")
_BOOL = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}


def redact_url(url: str) -> str:
    """The URL with any password replaced by '***' (safe for logs and errors)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    netloc = f"{user}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return parts._replace(netloc=netloc).geturl()


@dataclass(frozen=True, slots=True)
class RedisSettings:
    """How to reach Redis. Build it with `from_url()`; never log `password`."""

    host: str = "localhost"
    port: int = 6379
    db: int = 0
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: bool = False
    ssl_ca_certs: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    cluster: bool = False
    socket_timeout: float = 5.0
    connect_timeout: float = 5.0
    max_connections: int = 20
    setting_name: str = "REDIS_URL"

    @classmethod
    def from_url(
        cls, url: str, *, setting_name: str = "REDIS_URL", **overrides: Any
    ) -> RedisSettings:
        """Parse a redis:// or rediss:// URL; a bad one raises ConfigurationError naming
        `setting_name` (and never echoing the password)."""
        safe = redact_url(url)
        try:
            parts = urlsplit(url)
            port = parts.port or 6379
        except ValueError as exc:
            raise ConfigurationError(setting_name, f"malformed URL {safe!r}: {exc}") from None
        if parts.scheme not in _SCHEMES:
            raise ConfigurationError(
                setting_name, f"scheme must be redis:// or rediss://, got {safe!r}"
            )
        if not parts.hostname:
            raise ConfigurationError(setting_name, f"no host in {safe!r}")
        db = 0
        path = parts.path.strip("/")
        if path:
            if not path.isdigit():
                raise ConfigurationError(setting_name, f"database must be a number, got {path!r}")
            db = int(path)
        values: dict[str, Any] = {
            "host": parts.hostname,
            "port": port,
            "db": db,
            "username": unquote(parts.username) if parts.username else None,
            "password": unquote(parts.password) if parts.password else None,
            "tls": parts.scheme == "rediss",
            "setting_name": setting_name,
        }
        for key, raw in parse_qsl(parts.query, keep_blank_values=True):
            if key in ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile"):
                values[key] = raw
            elif key == "password_file":
                values["password"] = _read_password_file(raw, setting_name)
            elif key == "cluster":
                if raw.lower() not in _BOOL:
                    raise ConfigurationError(
                        setting_name, f"cluster must be true/false, got {raw!r}"
                    )
                values["cluster"] = _BOOL[raw.lower()]
            elif key in ("socket_timeout", "connect_timeout"):
                values[key] = _positive_float(raw, f"{setting_name} {key}")
            elif key == "max_connections":
                values[key] = int(_positive_float(raw, f"{setting_name} {key}"))
            else:
                raise ConfigurationError(setting_name, f"unknown URL option {key!r}")
        values.update(overrides)
        if values.get("cluster") and db != 0:
            raise ConfigurationError(setting_name, "Redis Cluster has only database 0")
        return cls(**values)

    def redacted_url(self) -> str:
        scheme = "rediss" if self.tls else "redis"
        auth = ""
        if self.username or self.password:
            auth = quote(self.username or "") + (":***" if self.password else "") + "@"
        return f"{scheme}://{auth}{self.host}:{self.port}/{self.db}"

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
            "retry": Retry(ExponentialBackoff(cap=2.0, base=0.05), retries=3),
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
        """A new client with its own pool; the caller closes it with `aclose()`."""
        kwargs = self.client_kwargs() | extra
        if self.cluster:
            kwargs.pop("health_check_interval", None)
            return RedisCluster(**kwargs)
        return aioredis.Redis(**kwargs)


def _read_password_file(path: str, setting_name: str) -> str:
    try:
        return Path(os.path.expanduser(path)).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigurationError(
            setting_name, f"cannot read password_file {path!r}: {exc.strerror}"
        ) from None


def _positive_float(raw: str, name: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ConfigurationError(name, f"must be a number, got {raw!r}") from None
    if value <= 0:
        raise ConfigurationError(name, f"must be positive, got {raw!r}")
    return value
