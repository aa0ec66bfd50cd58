"""The consumer side of the queue: workers that take jobs, run them under a lease and
settle each attempt.

    run_loop.py       Worker: fetches (BLMOVE or the claim's own take) and starts attempts
    settlement.py     one attempt from its handler's start to its recorded outcome
    attempt_calls.py  the fenced script calls: claim, take, renew, complete, fail, expire
    lease_keeper.py   lease renewal on a thread of its own, and the loop-stall watch
    chores.py         the periodic chores: reaper, retry promoter, TTL cleanup, heartbeat
    retention.py      bounding the dead-letter and failed lists
    handler_calls.py  calling an async or a sync handler
    attempt_log.py    one rate-limited line per failed attempt; JSON log lines
    coalescer.py      completions issued close together share one script call
"""

from __future__ import annotations

from .attempt_calls import AttemptCalls, Claim
from .chores import Chores, ReapReport
from .run_loop import Worker

__all__ = ["AttemptCalls", "Chores", "Claim", "ReapReport", "Worker"]
