"""A keyspace snapshot for fault-injection tests: Redis does not undo a script that fails
midway, so "every key unchanged" (DUMP and absolute expiry compared) is the proof that
every check of a write path ran before its first write."""

from __future__ import annotations

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

Snapshot = dict[bytes, tuple[bytes | None, int]]
"""Every key: its DUMP and its absolute expiry in ms (PEXPIRETIME: -1 for none). The
absolute expiry, not PTTL: a remaining TTL counts down between two snapshots."""


async def snapshot(raw_bytes: Redis | RedisCluster) -> Snapshot:
    """Every key of the server (all primaries of a cluster); `raw_bytes` must not decode
    replies, since DUMP is binary.

    A hash in its hashtable encoding (a field or value past hash-max-listpack-value, e.g.
    a queue job's payload) dumps its fields in table order, which incremental rehashing
    changes on mere reads: such a hash is kept as its sorted fields instead (and such a
    set as its sorted members)."""
    keys = {key async for key in raw_bytes.scan_iter(count=1000)}
    return {
        key: (await _content(raw_bytes, key), await raw_bytes.pexpiretime(key))
        for key in sorted(keys)
    }


async def _content(raw_bytes: Redis | RedisCluster, key: bytes) -> bytes | None:
    if await raw_bytes.object("ENCODING", key) == b"hashtable":
        kind = await raw_bytes.type(key)
        if kind == b"hash":
            fields = await raw_bytes.execute_command("HGETALL", key)
            return b"hash:" + repr(sorted(fields.items())).encode()
        if kind == b"set":
            return b"set:" + repr(sorted(await raw_bytes.execute_command("SMEMBERS", key))).encode()
    dumped: bytes | None = await raw_bytes.dump(key)
    return dumped


def changed_keys(before: Snapshot, after: Snapshot) -> set[bytes]:
    """Keys added, removed, or whose value or expiry differs."""
    return {key for key in before.keys() | after.keys() if before.get(key) != after.get(key)}
