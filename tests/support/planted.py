"""Dead letters and damaged records planted straight into Redis, as the scripts would
have left them: thousands in one pipeline (a worker failing each would take minutes),
or a record whose stored fields no longer parse."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from platform_common.jobs.keys import QueueKeys

__all__ = ["plant_dead_letters"]


def plant_dead_letters(
    client: Any, keys: QueueKeys, count: int, error: Callable[[int], str], *, prefix: str = "p"
) -> list[str]:
    """`count` dead letters of `keys`' type, ids `<prefix>-<n>`, oldest first (the last
    is the newest, at the list's head), each with `error(n)` as its last error. Returns
    the ids. `client`: a synchronous redis-py client (decode_responses=True)."""
    ids = [f"{prefix}-{n:06d}" for n in range(count)]
    pipe = client.pipeline(transaction=False)
    for n, job_id in enumerate(ids):
        history = [{"attempt": 1, "worker": "w-1", "outcome": "error", "error": error(n)}]
        fields = {
            "payload": json.dumps({"job_id": job_id, "agent_type": keys.agent_type, "task": n}),
            "state": "dead", "attempts": "1", "max_attempts": "1", "ttl": "60",
            "enqueued_at": "1700000000000", "expires_at": "1700000060000",
            "finished_at": str(1700000001000 + n), "last_error": error(n),
            "history": json.dumps(history),
        }  # fmt: skip
        pipe.hset(keys.job(job_id), mapping=fields)
        pipe.lpush(keys.dead, job_id)  # as the fail script: the newest at the head
    pipe.execute()
    return ids
