"""A worker's liveness probe: is its heartbeat in Redis fresh?

    python -m platform_common.jobs.heartbeat_probe --agent-type dining --worker-id "$POD_NAME"

Exit 0 when the worker's heartbeat (jobs:{type}:workers) is younger than --max-age
(default three heartbeat intervals), or when Redis cannot tell: unreachable, refusing
this user, or full (noeviction refuses the heartbeat write). Restarting a worker helps
none of those, and the worker reconnects by itself. Exit 1 when Redis answers and the
beat is stale or missing: the process lives but its event loop is wedged or its chores
died, which a restart does fix. Redis settings as for the worker (QUEUE_* and REDIS_URL
variables), so the probe connects as the worker's own ACL user.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from redis.exceptions import RedisError

from .errors import ConfigurationError, JobsError
from .keys import QueueKeys
from .queue import QueueSettings
from .redis.memory_policy import parse_memory_info
from .redis.script import run_pipelined
from .validation import validate_name

__all__ = ["Verdict", "check", "main"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """The probe's answer: `alive` decides the exit status, `reason` is its one line."""

    alive: bool
    reason: str


async def check(
    settings: QueueSettings, agent_type: str, worker_id: str, max_age: float
) -> Verdict:
    """Read Redis TIME and the worker's heartbeat in one round trip and judge them."""
    client = settings.redis.make_client(health_check_interval=0)
    try:
        keys = QueueKeys(agent_type, settings.prefix)
        try:
            now, beat = await run_pipelined(
                client, [("TIME",), ("ZSCORE", keys.workers, worker_id)]
            )
            for reply in (now, beat):
                if isinstance(reply, Exception):
                    raise reply
            seconds, micros = now
            age = int(seconds) + int(micros) / 1e6 - float(beat) / 1000 if beat else None
            if age is not None and age <= max_age:
                return Verdict(True, f"heartbeat {age:.1f}s old")
            memory = parse_memory_info(await client.info("memory"))
        except (RedisError, OSError, ValueError) as exc:
            return Verdict(True, f"cannot tell, Redis: {type(exc).__name__}: {exc}")
    finally:
        await client.aclose()
    if memory.max_bytes and memory.used_bytes >= memory.max_bytes:
        return Verdict(True, "cannot tell: Redis is at maxmemory and refuses the heartbeat")
    seen = "no heartbeat" if age is None else f"heartbeat {age:.1f}s old"
    return Verdict(False, f"{seen} for worker {worker_id!r} of {agent_type!r} (max {max_age}s)")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the probe; print its one line; 0 alive (or cannot tell), 1 stale, 2 bad usage."""
    # argparse, not the CLI's typer: the probe runs in the worker's install (the core
    # alone) in a fresh interpreter every probe period, where typer and rich would cost
    # about 45 ms of imports each time (see cli/worker_command.py).
    parser = argparse.ArgumentParser(prog="python -m platform_common.jobs.heartbeat_probe")
    parser.add_argument("--agent-type", required=True)
    parser.add_argument("--worker-id", required=True, help="the worker's --worker-id")
    parser.add_argument("--max-age", type=float, help="seconds (default: 3 heartbeat intervals)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        agent_type = validate_name(args.agent_type, "--agent-type")
        if not args.worker_id:
            raise ConfigurationError("--worker-id", "must not be empty")
        settings = QueueSettings.from_env()
        max_age = args.max_age if args.max_age is not None else 3 * settings.heartbeat_interval
        if max_age <= 0:
            raise ConfigurationError("--max-age", f"must be positive, got {max_age}")
    except (JobsError, ValueError) as exc:
        print(f"heartbeat probe: {exc}", file=sys.stderr)
        return 2
    verdict = asyncio.run(check(settings, agent_type, args.worker_id, max_age))
    print(f"{'alive' if verdict.alive else 'stale'}: {verdict.reason}")
    return 0 if verdict.alive else 1


if __name__ == "__main__":
    sys.exit(main())
