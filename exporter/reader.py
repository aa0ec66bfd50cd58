"""Reads one Snapshot from Redis: one pipeline, one round trip (per node on a cluster).

The pipeline carries the type discovery (SCARD + one SSCAN page of `jobs:types`) and one
EVALSHA_RO of exporter_snapshot.lua per agent type exported by the previous scrape, so in
the steady state a scrape costs one round trip whatever the number of types or jobs. A
scrape that discovers a new type reads it in a second round trip at once (never a stale
or missing number), and so does one that finds the script gone (SCRIPT FLUSH, restart):
it resends the source with EVAL_RO, which also caches it again. Every command is
read-only, so the exporter runs under a read-only ACL user.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ResponseError

from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.redis.script import Command, Script, ScriptCall, run_pipelined
from platform_common.jobs.redis.url import RedisClient

from .discovery import scan_count, select_types
from .settings import ExporterSettings
from .snapshot import Snapshot, TypeSnapshot, parse_type_reply

__all__ = ["SnapshotReader", "make_exporter_client"]

_SCRIPT = Script.named("exporter_snapshot")
# New types and a lost script each cost one extra round trip; never loop beyond that.
_MAX_ROUND_TRIPS = 3


def make_exporter_client(settings: ExporterSettings) -> RedisClient:
    """A client whose every wait is bounded by the scrape timeout.

    One immediate retry lets the first scrape after a Redis restart replace the dead
    pooled connection and still succeed; no health-check PING, which would be an extra
    round trip on an idle connection. Concurrent scrapes beyond the pool wait for a
    connection (up to the scrape timeout) rather than report Redis down.
    """
    timeout = settings.redis_timeout
    return settings.redis.make_client(
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 1),
        health_check_interval=0,
        max_connections=4,
        pool_timeout=timeout,
    )


class SnapshotReader:
    """Reads snapshots with `client`; remembers only which types the last scrape exported
    (to read them in the discovery round trip) and whether Redis has the script cached."""

    def __init__(self, client: RedisClient, settings: ExporterSettings) -> None:
        self._client = client
        self._settings = settings
        # Unknown until the first call: send the source once (EVAL_RO caches it), then SHAs.
        self._script_cached = False
        self._previous: tuple[str, ...] = settings.agent_types

    async def read(self) -> Snapshot:
        """One snapshot; Redis errors (connection, timeout, auth) propagate to the caller."""
        types_key = QueueKeys.types_key(self._settings.queue_prefix)
        commands: list[Command] = [
            ("SCARD", types_key),
            ("SSCAN", types_key, 0, "COUNT", scan_count(self._settings.max_agent_types)),
        ]
        commands += [self._type_call(agent_type) for agent_type in self._previous]
        replies = await run_pipelined(self._client, commands)
        round_trips = replies.round_trips
        set_size, (cursor, members) = _ok(replies[0]), _ok(replies[1])
        selection = select_types(
            self._settings.agent_types,
            members,
            set_size=int(set_size),
            scan_complete=int(cursor) == 0,
            max_agent_types=self._settings.max_agent_types,
        )
        results: dict[str, TypeSnapshot] = {}
        malformed = selection.invalid
        first = self._take(dict(zip(self._previous, replies[2:], strict=True)), results)
        malformed += first.malformed
        todo = [t for t in selection.types if t not in results and t not in first.broken]
        while todo and round_trips < _MAX_ROUND_TRIPS:
            more = await run_pipelined(self._client, [self._type_call(t) for t in todo])
            round_trips += more.round_trips
            step = self._take(dict(zip(todo, more, strict=True)), results)
            malformed += step.malformed
            todo = [t for t in todo if t not in results and t not in step.broken]
        self._previous = selection.types
        return Snapshot(
            types=tuple(results[t] for t in selection.types if t in results),
            types_dropped=selection.dropped,
            malformed=malformed,
            round_trips=round_trips,
        )

    def _type_call(self, agent_type: str) -> ScriptCall:
        keys = QueueKeys(agent_type, self._settings.queue_prefix)
        key_list = [keys.queue, keys.processing, keys.delayed, keys.dead, keys.stats, keys.workers]
        args = [keys.job(""), self._settings.heartbeat_window_ms]
        return _SCRIPT.call(key_list, args, readonly=True, send_source=not self._script_cached)

    def _take(self, replies: dict[str, Any], results: dict[str, TypeSnapshot]) -> _Step:
        """Parse replies into `results`; note the types to skip."""
        step = _Step()
        for agent_type, reply in replies.items():
            if isinstance(reply, ResponseError):
                # e.g. WRONGTYPE: a key of this type holds something else. Skip the type.
                step.malformed += 1
                step.broken.add(agent_type)
            elif isinstance(reply, Exception):
                raise reply
            else:
                results[agent_type], bad = parse_type_reply(
                    agent_type, reply, self._settings.latency_buckets
                )
                step.malformed += bad
                self._script_cached = True  # it ran, so this server holds it now
        return step


@dataclass(slots=True)
class _Step:
    malformed: int = 0
    broken: set[str] = field(default_factory=set)
    """Types whose script failed (NOSCRIPT aside, which run_pipelined re-runs): skipped."""


def _ok(reply: Any) -> Any:
    if isinstance(reply, Exception):
        raise reply
    return reply
