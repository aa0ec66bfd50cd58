"""What a site chooses for its worker manifests (`agentjobs deploy render`'s options),
each checked when given: a bad value is a ConfigurationError naming its option, never an
object the API server (or the worker at start) refuses later."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from platform_common.jobs.errors import ConfigurationError, ValidationError
from platform_common.jobs.validation import validate_name

__all__ = ["DEFAULT_REDIS_ADDRESS", "ECHO_HANDLER", "Workers"]

ECHO_HANDLER = "platform_common.jobs.queue.builtin:echo"
"""The package's echo: a job's result is its own payload. Runnable, but no handler."""
DEFAULT_REDIS_ADDRESS = "redis.platform.svc.cluster.local:6380"
"""deploy/kubernetes/redis.yaml's Service, applied in namespace `platform`."""

_IMAGE = re.compile(
    r"[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?"
)
_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
_HANDLER = re.compile(rf"{_IDENTIFIER}(?:\.{_IDENTIFIER})*:{_IDENTIFIER}")
_DNS_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?")
_HOST_PORT = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?:[0-9]{1,5}")
# The longest name is `queue-worker-<type>`, also a label value (63 characters at most).
_MAX_TYPE_LENGTH = 63 - len("queue-worker-")


@dataclass(frozen=True, slots=True)
class Workers:
    """What differs between sites, checked on construction."""

    image: str
    handler: str
    """`pkg.module:function` inside `image` (the worker imports it at start)."""
    agent_types: tuple[str, ...]
    prometheus_url: str
    """The Prometheus KEDA queries (reachable from KEDA's operator, in the cluster)."""
    namespace: str | None = None
    """The Kubernetes namespace of every object; None leaves it to kubectl / kustomize."""
    redis_address: str = DEFAULT_REDIS_ADDRESS
    concurrency: int = 10
    """Jobs per worker at once, and so the scaler's target per replica."""

    def __post_init__(self) -> None:
        if not _IMAGE.fullmatch(self.image):
            raise ConfigurationError("--image", f"not an image reference: {self.image!r}")
        if not _HANDLER.fullmatch(self.handler):
            raise ConfigurationError(
                "--handler", f"expected pkg.module:function, got {self.handler!r}"
            )
        if not self.agent_types:
            raise ConfigurationError("--agent-types", "names no agent type")
        if len(set(self.agent_types)) != len(self.agent_types):
            raise ConfigurationError("--agent-types", "names an agent type twice")
        for agent_type in self.agent_types:
            _check_agent_type(agent_type)
        parts = urlsplit(self.prometheus_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigurationError(
                "--prometheus-url", f"must be an absolute http(s) URL: {self.prometheus_url!r}"
            )
        if self.namespace is not None and not (
            len(self.namespace) <= 63 and _DNS_LABEL.fullmatch(self.namespace)
        ):
            raise ConfigurationError(
                "--namespace",
                f"not a Kubernetes namespace (a-z 0-9 -, at most 63): {self.namespace!r}",
            )
        port = self.redis_address.rpartition(":")[2]
        if not _HOST_PORT.fullmatch(self.redis_address) or not 0 < int(port) < 65536:
            raise ConfigurationError(
                "--redis-address", f"expected host:port, got {self.redis_address!r}"
            )
        if not 1 <= self.concurrency <= 10_000:
            raise ConfigurationError("--concurrency", f"must be 1..10000, got {self.concurrency}")

    def command_line(self) -> str:
        """The `agentjobs deploy render` options that make these files (for their header)."""
        words = [
            f"--image {self.image}",
            f"--handler {self.handler}",
            f"--agent-types {','.join(self.agent_types)}",
            f"--prometheus-url {self.prometheus_url}",
        ]
        if self.namespace is not None:
            words.append(f"--namespace {self.namespace}")
        if self.redis_address != DEFAULT_REDIS_ADDRESS:
            words.append(f"--redis-address {self.redis_address}")
        if self.concurrency != 10:
            words.append(f"--concurrency {self.concurrency}")
        return " ".join(words)


def _check_agent_type(agent_type: str) -> None:
    try:
        validate_name(agent_type, "--agent-types")
    except ValidationError as exc:
        raise ConfigurationError("--agent-types", exc.problem) from None
    if len(agent_type) > _MAX_TYPE_LENGTH or not _DNS_LABEL.fullmatch(agent_type):
        raise ConfigurationError(
            "--agent-types",
            f"{agent_type!r} cannot name Kubernetes objects (queue-worker-{agent_type}): "
            f"a-z 0-9 -, at most {_MAX_TYPE_LENGTH} characters",
        )
