"""Redis CPU per script call (not a test): the enqueue, claim and complete scripts run as EVALSHA of
this tree's sources, as EVALSHA of another release's (`--baseline <git ref>`), and as
FCALL of this tree's sources loaded as one Redis Functions library.

    .venv/bin/python -m bench.lua_cpu [--calls 20000] [--rounds 5] [--baseline REF]

Starts one redis-server (no persistence) per variant. A round empties them (FLUSHALL,
CONFIG RESETSTAT), then runs `calls` lone enqueues on each (one job of about 0.5 KiB per
call, the producer's keys and arguments, and a traced producer's trace context), then
`calls` takes of one job each (the worker's take: the move off the queue and the claim in
one call), then `calls` completions of one job each (the result, the three histograms and
their exemplars), in pipelines of 100;
the variants take turns of 1,000 calls, so that the load of a shared machine falls on
each alike. Prints, per variant and script, the median over the rounds of INFO
commandstats' usec_per_call of EVALSHA or FCALL (the script's whole run, the commands it
calls included) and the min-max; then the same for the server's used_cpu_user +
used_cpu_sys per call (the network and parsing too).
The Functions library wraps each script's source in `function(KEYS, ARGV) ... end`: the
same code, called by name instead of by digest.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from platform_common.jobs.keys import (
    ARRIVAL_BUCKET_MS,
    DEFAULT_LATENCY_BUCKETS,
    EXPIRY_BUCKET_MS,
    QueueKeys,
    latency_bucket_field,
)
from platform_common.jobs.queue.payload import fairness_values
from platform_common.jobs.redis.script import assemble, lua_source
from tests.support.redis_server import RedisServer
from tests.support.sync_redis import sync_reply

SCRIPTS = ("queue_enqueue", "queue_claim", "queue_complete")
PAYLOAD = '{"task":"bench","filler":"' + "x" * 480 + '"}'
KEYS = QueueKeys("bench")
LEASE_MS = 30_000
SKEW_MS = 300_000
PIPELINE = 100
BLOCK = 1000  # calls a variant sends in its turn


@dataclass(frozen=True)
class Variant:
    name: str
    sources: dict[str, str]
    functions: bool = False

    def command(self, script: str, keys: list[str], args: list[Any]) -> tuple[Any, ...]:
        if self.functions:
            return ("FCALL", script, len(keys), *keys, *args)
        digest = _digest(self.sources[script])
        return ("EVALSHA", digest, len(keys), *keys, *args)

    def load(self, client: redis.Redis) -> None:
        if self.functions:
            raw(client, "FUNCTION", "LOAD", "REPLACE", library(self.sources))
        else:
            for source in self.sources.values():
                raw(client, "SCRIPT", "LOAD", source)

    @property
    def stat(self) -> str:
        return "cmdstat_fcall" if self.functions else "cmdstat_evalsha"


def raw(client: redis.Redis, *args: Any) -> Any:
    return client.execute_command(*args)  # type: ignore[no-untyped-call]


def _digest(source: str) -> str:
    return hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest()


def library(sources: dict[str, str]) -> str:
    """One Functions library holding each script as a function of its name."""
    parts = ["#!lua name=jobs_bench"]
    for name, source in sources.items():
        parts.append(f"redis.register_function('{name}', function(KEYS, ARGV)\n{source}\nend)")
    return "\n".join(parts)


def git_reader(ref: str) -> Callable[[str], str]:
    def read(path: str) -> str:
        shown = subprocess.run(
            ["git", "show", f"{ref}:platform_common/jobs/lua/{path}.lua"],
            capture_output=True,
            text=True,
        )
        if shown.returncode != 0:
            raise FileNotFoundError(path)
        return shown.stdout

    return read


FAIRNESS = fairness_values(
    {"session_id": "0b7e6f4a-session", "orchestrator_id": "orch-123", "tenant": "acme"}
)
"""The fairness values the producer sends with the bench's job (queue/payload.py)."""


def enqueue_call(job_id: str, now_ms: int) -> tuple[list[str], list[Any]]:
    expires = now_ms + 3_600_000
    keys = [
        KEYS.queue, KEYS.stats, KEYS.queued, KEYS.expiring, KEYS.arrivals, KEYS.arrived,
        KEYS.deadline_mark, KEYS.job(job_id), KEYS.result(job_id),
        KEYS.expiring_bucket(expires - expires % EXPIRY_BUCKET_MS),
        # As the producer sends a job with fairness values (every job has a session_id):
        # the schedule's and level's slots unused, the limits (fair_by read: none set)
        # and the ring. A release before fair share ignores them.
        KEYS.delayed, KEYS.expiry, KEYS.level_queues[0], KEYS.limits, KEYS.fair_ring,
    ]  # fmt: skip
    # Accepted from now - SKEW_MS, refused from the job's deadline (the producer's checks).
    args: list[Any] = [uuid.uuid4().hex, 1, now_ms - SKEW_MS, expires, EXPIRY_BUCKET_MS]
    trace_context = f'{{"traceparent":"00-{uuid.uuid4().hex}-{uuid.uuid4().hex[:16]}-01"}}'
    args += [ARRIVAL_BUCKET_MS, job_id, PAYLOAD, 3600, now_ms, 3, trace_context]
    return keys, [*args, "", "", FAIRNESS]


def complete_call(job_id: str, token: str) -> tuple[list[str], list[Any]]:
    """The worker's completion of one job (as AttemptCalls.complete_call builds it)."""
    keys = [KEYS.processing, KEYS.leases, KEYS.expiry, KEYS.stats]
    keys += [KEYS.job(job_id), KEYS.result(job_id), KEYS.cancels]
    args: list[Any] = [KEYS.channel, len(DEFAULT_LATENCY_BUCKETS)]
    for bound in DEFAULT_LATENCY_BUCKETS:
        args += [bound, latency_bucket_field(bound).removeprefix("latency")]
    args += [latency_bucket_field(float("inf")).removeprefix("latency")]
    return keys, [*args, job_id, token, '{"ok":true}']


def take_call(
    token: str, previous: str, *, paused: bool = True, levels: bool = True
) -> tuple[list[str], list[Any]]:
    """The take of one job; `paused`: the claim's keys include the pause key (a release
    before pausing had none); `levels`: the priority levels' lists and then the limits'
    keys, last (as the worker passes them; a release before priorities had none). The
    type has no limits set: this is the FIFO path a type without limits takes."""
    keys = [
        KEYS.processing, KEYS.leases, KEYS.stats, KEYS.expiry, KEYS.queue, KEYS.waiting,
        KEYS.queued, KEYS.arrivals, KEYS.arrived, *([KEYS.paused] if paused else []),
        KEYS.take(token), KEYS.take(previous),
        *((*KEYS.level_queues, KEYS.limits, KEYS.rate, KEYS.fair_ring) if levels else ()),
    ]  # fmt: skip
    args: list[Any] = [LEASE_MS, "bench-worker", KEYS.channel, ARRIVAL_BUCKET_MS, 1]
    args += [KEYS.job(""), KEYS.result(""), token]
    return keys, args


# What each call must reply, so that what is measured is the path a worker takes (an
# enqueue refused as expired, a take of an empty queue or a lost completion cost less).
DID_ITS_WORK: dict[str, Callable[[Any], bool]] = {
    "queue_enqueue": lambda reply: reply[0] == b"ok",
    "queue_claim": lambda reply: len(reply) == 2 and reply[1][1] == b"run",
    "queue_complete": lambda reply: reply == [[b"ok"]],
}


def run(client: redis.Redis, script: str, commands: list[tuple[Any, ...]]) -> None:
    for first in range(0, len(commands), PIPELINE):
        pipe = client.pipeline(transaction=False)
        for command in commands[first : first + PIPELINE]:
            pipe.execute_command(*command)  # type: ignore[no-untyped-call]
        for reply in pipe.execute(raise_on_error=False):
            if isinstance(reply, Exception):
                raise reply
            if not DID_ITS_WORK[script](reply):
                raise RuntimeError(f"{script} replied {reply!r}: not the path measured")


def cpu(client: redis.Redis) -> float:
    info = sync_reply(client.info("cpu"))
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def measure(
    clients: dict[str, redis.Redis], variants: list[Variant], calls: int
) -> dict[str, dict[str, tuple[float, float]]]:
    """Per variant and script: usec_per_call (commandstats) and used_cpu us per call.
    Each variant runs on its own server; their calls are sent in turns of BLOCK, so a
    load that comes and goes on the machine falls on every variant alike."""
    phases: dict[str, dict[str, list[tuple[Any, ...]]]] = {}
    for variant in variants:
        client = clients[variant.name]
        client.flushall()
        raw(client, "FUNCTION", "FLUSH")
        raw(client, "SCRIPT", "FLUSH")
        variant.load(client)
        now_ms = int(sync_reply(client.time())[0]) * 1000
        tokens = [uuid.uuid4().hex for _ in range(calls)]
        paused = "paused" in variant.sources["queue_claim"]
        levels = "WAKE_MARKER" in variant.sources["queue_claim"]
        phases[variant.name] = {
            "queue_enqueue": [
                variant.command("queue_enqueue", *enqueue_call(f"job-{i}", now_ms))
                for i in range(calls)
            ],
            "queue_claim": [
                variant.command(
                    "queue_claim",
                    *take_call(token, tokens[i - 1] if i else token, paused=paused, levels=levels),
                )
                for i, token in enumerate(tokens)
            ],
            # FIFO: the i-th take claimed job-i.
            "queue_complete": [
                variant.command("queue_complete", *complete_call(f"job-{i}", token))
                for i, token in enumerate(tokens)
            ],
        }
    out: dict[str, dict[str, tuple[float, float]]] = {v.name: {} for v in variants}
    for script in SCRIPTS:
        used = dict.fromkeys(clients, 0.0)
        for client in clients.values():
            client.config_resetstat()
        for turn, first in enumerate(range(0, calls, BLOCK)):
            shift = turn % len(variants)
            for variant in variants[shift:] + variants[:shift]:
                client = clients[variant.name]
                before = cpu(client)
                run(client, script, phases[variant.name][script][first : first + BLOCK])
                used[variant.name] += cpu(client) - before
        for variant in variants:
            stat = sync_reply(clients[variant.name].info("commandstats"))[variant.stat]
            assert int(stat["calls"]) == calls, stat
            out[variant.name][script] = (
                float(stat["usec_per_call"]),
                used[variant.name] * 1e6 / calls,
            )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline", help="a git ref whose scripts to compare with")
    options = parser.parse_args(argv)
    tree = {name: lua_source(name) for name in SCRIPTS}
    variants = []
    if options.baseline:
        read = git_reader(options.baseline)
        baseline = {name: assemble(name, read) for name in SCRIPTS}
        variants.append(Variant(f"EVALSHA {options.baseline}", baseline))
    variants.append(Variant("EVALSHA this tree", tree))
    variants.append(Variant("FCALL this tree", tree, functions=True))
    results: dict[str, list[dict[str, tuple[float, float]]]] = {v.name: [] for v in variants}
    servers = [RedisServer().start() for _ in variants]
    try:
        clients = {
            v.name: redis.Redis(port=server.port)
            for v, server in zip(variants, servers, strict=True)
        }
        for round_ in range(options.rounds):
            for name, measured in measure(clients, variants, options.calls).items():
                results[name].append(measured)
            print(f"round {round_ + 1} done", file=sys.stderr)
        for client in clients.values():
            client.close()
    finally:
        for server in servers:
            server.stop()
    print(f"{options.calls} calls per script, {options.rounds} rounds: median (min-max)")
    for metric, index in (("commandstats usec_per_call", 0), ("used_cpu us per call", 1)):
        print(f"\n{metric}")
        for name, rounds in results.items():
            cells = []
            for script in SCRIPTS:
                values = [r[script][index] for r in rounds]
                cells.append(
                    f"{script} {statistics.median(values):.2f} "
                    f"({min(values):.2f}-{max(values):.2f})"
                )
            print(f"  {name:<28} " + "   ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
