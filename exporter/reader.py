"""Reads one Snapshot from Redis: one pipeline of plain read commands, one round trip.

The pipeline carries Redis TIME, the type discovery (SCARD + one SSCAN page of
`jobs:types`), INFO memory, clients and stats (on a cluster, one addressed to each
primary) and, per agent type exported by the previous scrape, type_reads.type_commands:
in the steady state a scrape costs one round trip (per node on a cluster) whatever the
number of types or jobs. A newly discovered type is read at once, in a second round trip
(never a stale or missing number); fair share's key waits in one more (fair_share.py).

No script: the exporter's ACL user (platform_common.jobs.acl) may run exactly these
commands on these keys (and the keyless INFO), so it can neither read a job (payloads
are personal data) nor run Lua that could hold Redis busy. A single server's (or
Sentinel master's) request is sent by wire.py, packed once per type; a cluster's goes
through redis-py's cluster pipeline, which routes by slot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ResponseError

from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.redis.memory_policy import (
    MemoryInfo,
    describe_error,
    parse_memory_info,
    server_name,
)
from platform_common.jobs.redis.replies import first_score
from platform_common.jobs.redis.script import Command, Replies, Send, run_batch, run_pipelined
from platform_common.jobs.redis.url import RedisClient
from platform_common.jobs.type_registry import registry_reads, select_from_replies

from .fair_share import backlog_commands, fair_share, samples_keys, since_command, since_values
from .server_stats import INFO_SECTIONS, ServerStats, parse_server_stats
from .settings import ExporterSettings
from .snapshot import Snapshot, TypeSnapshot, type_snapshot, within_clock_tolerance
from .stats_hash import StatsReading, parse_stats
from .type_reads import TYPE_COMMAND_COUNT, TypeReplies, type_commands
from .wire import pack, send_and_read

__all__ = ["SnapshotReader", "make_exporter_client", "type_commands"]


def make_exporter_client(settings: ExporterSettings) -> RedisClient:
    """A client whose every wait is bounded by the scrape timeout. One immediate retry
    lets the first scrape after a Redis restart replace the dead pooled connection; no
    health-check PING (an extra round trip); scrapes beyond the pool wait for a
    connection rather than report Redis down."""
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
    """Reads snapshots with `client`; remembers which types the last scrape exported (to
    read them in the discovery round trip) and each type's packed commands."""

    def __init__(self, client: RedisClient, settings: ExporterSettings) -> None:
        self._client = client
        self._settings = settings
        self._previous: tuple[str, ...] = settings.agent_types
        self._packed: dict[str, bytes] = {}
        """Agent type -> its type_commands in the Redis protocol (the keys never change,
        and packing 7,000 commands cost more than Redis took to answer them)."""
        self._stats: dict[str, tuple[Any, StatsReading]] = {}
        """Agent type -> (its stats hash as last read, what it said)."""

    async def read(self) -> Snapshot:
        """One snapshot; Redis errors (connection, timeout, auth) propagate to the caller."""
        head: list[tuple[Any, ...]] = [
            ("TIME",),
            *registry_reads(self._settings.queue_prefix, self._settings.max_agent_types),
        ]
        replies, nodes = await self._with_memory(head, self._previous)
        end = len(head) + len(self._previous) * TYPE_COMMAND_COUNT
        memory, server, memory_problem = _server_info(nodes, replies[end:])
        round_trips = replies.round_trips
        now_ms = _now_ms(_ok(replies[0]))
        selection = select_from_replies(
            self._settings.agent_types,
            _ok(replies[1]),
            _ok(replies[2]),
            max_agent_types=self._settings.max_agent_types,
        )
        results: dict[str, TypeSnapshot] = {}
        first = self._take(self._previous, replies[len(head) : end], now_ms, results)
        malformed = selection.invalid + first.malformed
        todo = [t for t in selection.types if t not in results and t not in first.broken]
        if todo:
            # Types new since the last scrape: read now, with a TIME of their own.
            more = await self._run([("TIME",)], todo)
            round_trips += more.round_trips
            malformed += self._take(todo, more[1:], _now_ms(_ok(more[0])), results).malformed
        fair_trips, fair_malformed = await self._read_fair(results)
        round_trips += fair_trips
        malformed += fair_malformed
        self._previous = selection.types
        self._forget(selection.types)
        return Snapshot(
            types=tuple(results[t] for t in selection.types if t in results),
            types_dropped=selection.dropped,
            malformed=malformed,
            round_trips=round_trips,
            memory=memory,
            memory_problem=memory_problem,
            server=server,
        )

    async def _with_memory(
        self, head: list[tuple[Any, ...]], agent_types: Sequence[str]
    ) -> tuple[Replies, list[str]]:
        """`head`, the commands of `agent_types`, then INFO of every primary, in one
        pipeline -> the replies and the nodes the INFO ones come from."""
        client = self._client
        if not isinstance(client, RedisCluster):
            nodes = [server_name(self._settings.redis)]
            return await self._run(head, agent_types, [("INFO", *INFO_SECTIONS)]), nodes
        await client.initialize()  # a no-op once it is: the primaries come from its slot map
        primaries = client.get_primaries()
        commands = [*head, *self._commands(agent_types)]
        replies = await run_batch(_with_info_of(client, primaries), commands)
        return replies, [node.name for node in primaries]

    async def _run(
        self,
        head: list[tuple[Any, ...]],
        agent_types: Sequence[str] = (),
        tail: Sequence[tuple[Any, ...]] = (),
    ) -> Replies:
        """`head`, the commands of `agent_types`, then `tail`, in one pipeline."""
        client = self._client
        if isinstance(client, RedisCluster):
            commands = [*head, *self._commands(agent_types), *tail]
            return await run_pipelined(client, commands)
        request = b"".join([pack(head), *map(self._packed_type, agent_types), pack(tail)])
        count = len(head) + len(agent_types) * TYPE_COMMAND_COUNT + len(tail)
        return Replies(await send_and_read(client, request, count))

    async def _read_fair(self, results: dict[str, TypeSnapshot]) -> tuple[int, int]:
        """Put in each snapshot of `results` with keys waiting how they wait (and, with
        --fair-key-top, their backlogs) -> (round trips, malformed). A read refused
        (WRONGTYPE, or NOPERM: an ACL user of an older release) leaves that type's or
        that key's numbers out, counted."""
        waiting = [t for t in results.values() if t.fair_keys_waiting > 0]
        if not waiting:
            return 0, 0
        prefix = self._settings.queue_prefix
        keys = {t.agent_type: QueueKeys(t.agent_type, prefix) for t in waiting}
        commands = [since_command(keys[t.agent_type], t.fair_keys_waiting) for t in waiting]
        replies = await self._run([("TIME",), *commands])
        round_trips = replies.round_trips
        now_ms = _now_ms(_ok(replies[0]))
        malformed = 0
        read: dict[str, dict[str, float]] = {}
        for snapshot, reply in zip(waiting, replies[1:], strict=True):
            if _refused(reply):
                malformed += 1
                continue
            read[snapshot.agent_type], bad = since_values(reply)
            malformed += bad
        top = self._settings.fair_key_top
        backlogs: dict[str, dict[str, int]] = {t: {} for t in read}
        lists = [(t, key) for t, since in read.items() for key in since] if top else []
        if lists:
            more = await self._run(
                [c for t, since in read.items() for c in backlog_commands(keys[t], list(since))]
            )
            round_trips += more.round_trips
            for (agent_type, key), reply in zip(lists, more, strict=True):
                if _refused(reply):
                    malformed += 1
                    continue
                backlogs[agent_type][key] = _int_reply(reply)
        for agent_type, since in read.items():
            snapshot = results[agent_type]
            fair = fair_share(
                snapshot.fair_keys_waiting, since, now_ms,
                sampled=samples_keys(snapshot.fair_keys_waiting),
                backlogs=backlogs[agent_type], top=top,
            )  # fmt: skip
            results[agent_type] = replace(snapshot, fair=fair)
        return round_trips, malformed

    def _packed_type(self, agent_type: str) -> bytes:
        packed = self._packed.get(agent_type)
        if packed is None:
            keys = QueueKeys(agent_type, self._settings.queue_prefix)
            packed = self._packed[agent_type] = pack(type_commands(keys))
        return packed

    def _forget(self, exported: Sequence[str]) -> None:
        """Drop what is kept of types no longer exported, once they are many (a type set
        that churns must not grow it without bound)."""
        if len(self._packed) > 2 * len(exported) + 64:
            self._packed = {t: self._packed[t] for t in exported if t in self._packed}
        if len(self._stats) > 2 * len(exported) + 64:
            self._stats = {t: self._stats[t] for t in exported if t in self._stats}

    def _stats_of(self, agent_type: str, raw: Any) -> StatsReading:
        """`agent_type`'s stats hash parsed, or its last reading when the hash is as it
        was then (a quiet type: most of them, most of the time)."""
        last = self._stats.get(agent_type)
        if last is not None and last[0] == raw:
            return last[1]
        reading = parse_stats(raw, self._settings.latency_buckets)
        self._stats[agent_type] = (raw, reading)
        return reading

    def _commands(self, agent_types: Sequence[str]) -> list[Command]:
        prefix = self._settings.queue_prefix
        return [c for t in agent_types for c in type_commands(QueueKeys(t, prefix))]

    def _take(
        self,
        agent_types: Sequence[str],
        replies: Sequence[Any],
        now_ms: int,
        results: dict[str, TypeSnapshot],
    ) -> _Step:
        """Parse each type's replies into `results`; note the types to skip."""
        step = _Step()
        # Error replies are rare: find them in one pass, not per type.
        errors = (i for i, reply in enumerate(replies) if isinstance(reply, Exception))
        failed = {i // TYPE_COMMAND_COUNT for i in errors}
        since_ms = now_ms - self._settings.heartbeat_window_ms
        # Each type's replies, TYPE_COMMAND_COUNT at a time, without a slice per type.
        per_type = zip(*[iter(replies)] * TYPE_COMMAND_COUNT, strict=False)
        for index, (agent_type, own) in enumerate(zip(agent_types, per_type, strict=True)):
            if index in failed:
                for reply in own:
                    if isinstance(reply, Exception) and not isinstance(reply, ResponseError):
                        raise reply  # connection trouble: the whole scrape is "Redis down"
                # e.g. WRONGTYPE: a key of this type holds something else. Skip the type.
                step.malformed += 1
                step.broken.add(agent_type)
                continue
            read = TypeReplies.of(own)
            stats = self._stats_of(agent_type, read.stats)
            beats = _pairs_of(read.heartbeats)
            active, newest = _heartbeats(beats, now_ms, since_ms)
            oldest = first_score(read.oldest_waiting)
            depths = (read.queue_depth, read.in_progress, read.delayed_depth,
                      read.dead_letter_depth)  # fmt: skip
            snapshot, bad = type_snapshot(
                agent_type, now_ms, depths, stats, active, newest, oldest, beats,
                read.worker_jobs, read.paused, read.limits, read.level_depths,
                read.fair_keys_waiting,
            )  # fmt: skip
            results[agent_type] = snapshot
            step.malformed += bad
        return step


@dataclass(slots=True)
class _Step:
    malformed: int = 0
    broken: set[str] = field(default_factory=set)
    """Types whose replies included an error: skipped."""


def _with_info_of(client: RedisCluster, primaries: Sequence[ClusterNode]) -> Send:
    """pipeline_transport, plus INFO addressed to each primary in the same pipeline (a
    keyless command would go to one node): still one round trip per node."""

    async def send(commands: list[tuple[Any, ...]]) -> list[Any]:
        pipe = client.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        for node in primaries:
            pipe.execute_command("INFO", *INFO_SECTIONS, target_nodes=node)
        return list(await pipe.execute(raise_on_error=False))

    return send


def _server_info(
    nodes: Sequence[str], replies: Sequence[Any]
) -> tuple[dict[str, MemoryInfo], dict[str, ServerStats], str | None]:
    """(memory by node, clients and evictions by node, None), or ({}, {}, why not) when
    INFO was refused or a reply does not parse: Redis' own metrics are then left out,
    the rest of the scrape stands."""
    memory: dict[str, MemoryInfo] = {}
    server: dict[str, ServerStats] = {}
    for node, reply in zip(nodes, replies, strict=True):
        if _refused(reply):  # connection trouble raises: the whole scrape is "Redis down"
            return {}, {}, describe_error(reply)  # e.g. NOPERM: an exporter user without +info
        try:
            memory[node] = parse_memory_info(reply)
            server[node] = parse_server_stats(reply)
        except (ResponseError, ValueError) as exc:
            return {}, {}, describe_error(exc)
    return memory, server, None


def _pairs_of(raw: Any) -> list[tuple[Any, Any]]:
    """(member, score) pairs of a ZRANGE ... WITHSCORES reply: flat in RESP2, pairs in RESP3."""
    items = list(raw)
    if items and isinstance(items[0], list | tuple):
        return [(member, score) for member, score in items]
    return list(zip(items[::2], items[1::2], strict=True))


def _heartbeats(
    pairs: Sequence[tuple[Any, Any]], now_ms: int, since_ms: int
) -> tuple[int, object | None]:
    """(workers whose beat is newer than `since_ms`, the newest beat's score as Redis sent
    it), of the beats not dated in the future (snapshot.HEARTBEAT_CLOCK_TOLERANCE_MS):
    such a beat says nothing of whether its worker is alive."""
    scores = [score for _, score in pairs if within_clock_tolerance(float(score), now_ms)]
    active = sum(1 for score in scores if float(score) > since_ms)
    newest = max(scores, key=float) if scores else None
    return active, newest


def _now_ms(reply: Any) -> int:
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) // 1000


def _ok(reply: Any) -> Any:
    if isinstance(reply, Exception):
        raise reply
    return reply


def _refused(reply: Any) -> bool:
    """Whether `reply` is an error reply (WRONGTYPE, NOPERM); connection trouble raises:
    the whole scrape is "Redis down"."""
    if isinstance(reply, Exception) and not isinstance(reply, ResponseError):
        raise reply
    return isinstance(reply, ResponseError)


def _int_reply(reply: Any) -> int:
    return reply if type(reply) is int else int(str(reply))
