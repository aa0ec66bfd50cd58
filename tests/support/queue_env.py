"""What a test of the queue's scripts works with (tests/queue/conftest.py's `env`): the
queue, its calls for `dining` and two raw clients. A module adds its own helpers in a
subclass named `Env`, and the state its tests start from in `prepare()`."""

from __future__ import annotations

from dataclasses import dataclass

from platform_common.jobs.queue import JobQueue
from platform_common.jobs.redis.url import RedisClient
from platform_common.jobs.worker import AttemptCalls, Chores
from tests.support.keyspace import Snapshot, snapshot

__all__ = ["QueueEnv"]


@dataclass
class QueueEnv:
    queue: JobQueue
    leases: AttemptCalls
    """A worker's calls for one attempt of a `dining` job (claim, complete, fail, ...)."""
    chores: Chores
    """A worker's periodic calls for `dining` (reap, promote, heartbeat, ...)."""
    raw: RedisClient
    """Decodes replies (for setting up and reading back)."""
    raw_bytes: RedisClient
    """Bytes in, bytes out: DUMP."""

    async def prepare(self) -> None:
        """The state the module's tests start from (a subclass's; none here)."""

    async def snapshot(self) -> Snapshot:
        return await snapshot(self.raw_bytes)

    async def redis_ms(self) -> int:
        """Redis' clock (TIME) in ms."""
        seconds, micros = await self.raw.time()
        return int(seconds) * 1000 + int(micros) // 1000
