"""Redis' own health beside its memory: clients and evictions, from INFO clients and stats.

Read in the scrape's one pipeline, with INFO memory (`INFO memory clients stats`, one
command per primary; Redis 7 takes several sections at once).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["INFO_SECTIONS", "ServerStats", "parse_server_stats"]

INFO_SECTIONS = ("memory", "clients", "stats")
"""The INFO sections each scrape reads from every primary."""


@dataclass(frozen=True, slots=True)
class ServerStats:
    """One Redis node's clients and evictions."""

    connected_clients: int
    """`connected_clients`: client connections (replicas excluded)."""
    blocked_clients: int
    """`blocked_clients`: clients in a blocking call, e.g. idle workers in BLMOVE."""
    evicted_keys: int
    """`evicted_keys`: keys deleted by the maxmemory policy since the server started."""


def parse_server_stats(reply: object) -> ServerStats:
    """INFO's reply (redis-py's dict, or the raw text) -> ServerStats; ValueError naming
    the field when one is missing or malformed."""
    fields: Mapping[str, object]
    if isinstance(reply, Mapping):
        fields = reply
    elif isinstance(reply, str | bytes):
        text = reply.decode() if isinstance(reply, bytes) else reply
        pairs = (line.split(":", 1) for line in text.splitlines() if ":" in line)
        fields = {name.strip(): value.strip() for name, value in pairs}
    else:
        raise ValueError(f"INFO reply is a {type(reply).__name__}, not a mapping")
    return ServerStats(
        connected_clients=_count(fields, "connected_clients"),
        blocked_clients=_count(fields, "blocked_clients"),
        evicted_keys=_count(fields, "evicted_keys"),
    )


def _count(fields: Mapping[str, object], name: str) -> int:
    raw = fields.get(name)
    text = str(raw).strip()
    if raw is None or not text.isdigit():
        raise ValueError(f"INFO field {name} is {raw!r}, not a count")
    return int(text)
