"""The role matrix of docs/operations.md, proven: each role tries each operation as its user."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

import pytest
import redis.asyncio as aioredis
from redis.exceptions import NoPermissionError, ResponseError

from platform_common.jobs import acl
from platform_common.jobs.keys import (
    ARRIVAL_BUCKET_MS,
    COMPLETION_PATTERN,
    EXPIRY_BUCKET_MS,
    QueueKeys,
    StoreKeys,
    completion_channel,
    progress_channel,
)
from platform_common.jobs.redis.script import Script
from tests.support.paths import REPO_ROOT
from tests.support.redis_server import RedisServer

PASSWORD = "role-pw-matrix-93b1"
DOCS = REPO_ROOT / "docs" / "operations.md"
ROLE_NAMES = tuple(acl.ROLES)
# Producer and worker run scoped to one agent type and one JobStore agent, as the docs
# recommend; the other type and agent are someone else's.
OWN, OTHER = QueueKeys("dining"), QueueKeys("flights")
OWN_STORE, OTHER_STORE = StoreKeys("orders"), StoreKeys("billing")
NOW_MS = 1_800_000_000_000
PAYLOAD = '{"task": "dinner for Ana Ortiz, +34 600 000 000"}'  # personal data

Step = Callable[[aioredis.Redis], Awaitable[Any]]
Cell = Literal["allowed", "refused", "gap"]
"""gap: allowed although the role has no use for it, because an ACL cannot tell it apart
from what the role needs (the note says why)."""


@dataclass(frozen=True)
class Operation:
    name: str
    steps: tuple[Step, ...]
    producer: Cell
    worker: Cell
    exporter: Cell
    reader: Cell
    operator: Cell
    note: int | None = None
    """The number of the docs' note on what Redis ACLs cannot express."""

    def cell(self, role: str) -> Cell:
        value: Cell = getattr(self, role)
        return value


# -- steps: one Redis call each, as the role's client --------------------------------
def command(*args: Any) -> Step:
    return lambda client: client.execute_command(*args)  # type: ignore[no-untyped-call]


def script(name: str, keys: list[str], args: list[Any]) -> Step:
    # By source: EVAL is what a role sends after NOSCRIPT, and needs no cached script.
    source = Script.named(name).source
    return lambda client: client.execute_command("EVAL", source, len(keys), *keys, *args)  # type: ignore[no-untyped-call]


def enqueue(keys: QueueKeys, job_id: str) -> Step:
    # A window (ARGV[3], ARGV[4]) any Redis TIME lies in: created_at NOW_MS is neither
    # too far ahead of it nor past, whatever the date.
    shared = [keys.queue, keys.stats, keys.queued, keys.expiring, keys.arrivals, keys.arrived]
    shared.append(keys.deadline_mark)
    own = [keys.job(job_id), keys.result(job_id), keys.expiring_bucket(NOW_MS + 60_000)]
    return script(
        "queue_enqueue",
        [*shared, *own],
        ["nonce-1", 1, 0, 2 * NOW_MS, EXPIRY_BUCKET_MS, ARRIVAL_BUCKET_MS,
         job_id, PAYLOAD, 60, NOW_MS, 3],
    )  # fmt: skip


def complete(keys: QueueKeys, job_id: str) -> Step:
    return script(
        "queue_complete",
        [
            keys.processing,
            keys.leases,
            keys.expiry,
            keys.stats,
            keys.job(job_id),
            keys.result(job_id),
            keys.cancels,
        ],
        [keys.channel, 0, "_le:+Inf", job_id, "token-r1", '{"ok": true}'],
    )


def dead_requeue(keys: QueueKeys, job_id: str) -> Step:
    return script(
        "queue_dead_requeue",
        [keys.dead, keys.queue, keys.expiry, keys.stats, keys.waiting, keys.job(job_id),
         keys.result(job_id)],
        ["dead", "", job_id],
    )  # fmt: skip


def pause_and_resume(keys: QueueKeys) -> Step:
    """The pause script, then the resume (which writes only when the type is paused):
    the second is sent only if the first was let through (a refusal raises)."""
    paused = script("queue_pause", [keys.paused], ["pause"])
    resumed = script("queue_pause", [keys.paused], ["resume"])

    async def run(client: aioredis.Redis) -> None:
        await paused(client)
        await resumed(client)

    return run


def schedule(keys: QueueKeys, job_id: str) -> Step:
    """The enqueue script with a delay: a scheduled job (its hash, delayed, expiry)."""
    shared = [keys.queue, keys.stats, keys.queued, keys.expiring, keys.arrivals, keys.arrived]
    shared.append(keys.deadline_mark)
    own = [keys.job(job_id), keys.result(job_id), keys.expiring_bucket(NOW_MS + 60_000)]
    return script(
        "queue_enqueue",
        [*shared, *own, keys.delayed, keys.expiry],
        ["nonce-2", 1, 0, 2 * NOW_MS, EXPIRY_BUCKET_MS, ARRIVAL_BUCKET_MS,
         job_id, PAYLOAD, 3600, NOW_MS, 3, "", f"@{NOW_MS}"],
    )  # fmt: skip


def inject(keys: QueueKeys, job_id: str) -> Step:
    """A job no one enqueued: its job hash with a payload, its deadline in the expiry
    set, its due time in the delayed set (all the promoter and a claim need to run it, as
    for a scheduled job). Each write is sent only if the one before it was let through
    (a refusal raises)."""
    deadline = NOW_MS + 60_000

    async def run(client: aioredis.Redis) -> None:
        job = {"payload": PAYLOAD, "enqueued_at": NOW_MS, "expires_at": deadline, "ttl": 60,
               "max_attempts": 3, "attempts": 0}  # fmt: skip
        # (the delayed set first: a role refused it changes nothing)
        await client.zadd(keys.delayed, {job_id: NOW_MS})
        await client.hset(keys.job(job_id), mapping=job)
        await client.zadd(keys.expiry, {job_id: deadline})

    return run


def cancel(keys: QueueKeys, job_id: str) -> Step:
    """The cancel script (queue/cancel.py) of one job, as JobQueue.cancel sends it."""
    shared = [keys.queued, keys.waiting, keys.delayed, keys.expiry, keys.stats, keys.arrivals,
              keys.arrived, keys.control, keys.cancels]  # fmt: skip
    return script(
        "queue_cancel",
        [*shared, keys.job(job_id), keys.result(job_id)],
        [keys.channel, "a reason", ARRIVAL_BUCKET_MS, 10_000, 86_400, job_id],
    )


def store_create(keys: StoreKeys, job_id: str) -> Step:
    return script("store_create", [keys.record(job_id)], ["pending", "{}", 60, "", job_id])


async def _psubscribe(client: aioredis.Redis) -> Any:
    pubsub = client.pubsub()
    try:
        await pubsub.psubscribe(COMPLETION_PATTERN)
        # The subscription's confirmation, or the refusal raised in its place (the
        # timeout only bounds a broken server).
        message = await pubsub.get_message(timeout=10)
        assert message is not None and message["type"] == "psubscribe", message
        return message
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]


async def _subscribe_progress(client: aioredis.Redis) -> Any:
    """SUBSCRIBE to its type's progress channel, as ProgressEvents does."""
    pubsub = client.pubsub()
    try:
        await pubsub.subscribe(OWN.progress_channel)
        message = await pubsub.get_message(timeout=10)
        assert message is not None and message["type"] == "subscribe", message
        return message
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]


def report_progress(keys: QueueKeys, job_id: str) -> Step:
    return script(
        "queue_progress",
        [keys.job(job_id)],
        [job_id, "token-r1", '{"step": 1}', 16384, keys.progress_channel],
    )


OPERATIONS = (
    # What the roles are for.                      producer, worker, exporter, reader, operator
    Operation("Enqueue a job (enqueue script)", (enqueue(OWN, "n1"),),
              "allowed", "allowed", "refused", "refused", "refused"),
    Operation("Schedule a job (enqueue script with a run_at)", (schedule(OWN, "n3"),),
              "allowed", "allowed", "refused", "refused", "refused"),
    Operation("Register an agent type (SADD jobs:types)",
              (command("SADD", QueueKeys.types_key(), "dining"),),
              "allowed", "allowed", "refused", "refused", "refused"),
    Operation("Read a job: state and payload (HGETALL, HMGET, HGET of the job hash)",
              (command("HGETALL", OWN.job("q1")), command("HMGET", OWN.job("q1"), "state"),
               command("HGET", OWN.job("q1"), "payload")),
              "allowed", "allowed", "refused", "allowed", "allowed"),
    Operation("Read a result (GET)", (command("GET", OWN.result("done1")),),
              "allowed", "allowed", "refused", "allowed", "allowed"),
    Operation("Read depths and counters (HLEN of the queued hash, ZCARD, LLEN, HGETALL of "
              "the stats hash)",
              (command("HLEN", OWN.queued), command("ZCARD", OWN.waiting),
               command("LLEN", OWN.processing),
               command("ZCARD", OWN.delayed), command("LLEN", OWN.dead),
               command("HGETALL", OWN.stats)),
              "allowed", "allowed", "allowed", "allowed", "allowed"),
    Operation("Read worker heartbeats (ZRANGE of the workers set)",
              (command("ZRANGE", OWN.workers, 0, -1, "WITHSCORES"),),
              "refused", "refused", "allowed", "refused", "refused"),
    Operation("Read each worker's jobs in progress (HGETALL of the worker_jobs hash)",
              (command("HGETALL", OWN.worker_jobs),),
              "refused", "allowed", "allowed", "refused", "refused"),
    Operation("Read fair share's keys waiting and since when each has had no start (HLEN, "
              "HGETALL of the ring's since hash)",
              (command("HLEN", OWN.fair_since), command("HGETALL", OWN.fair_since)),
              "refused", "allowed", "allowed", "allowed", "allowed"),
    Operation("Read a sample of those keys (HRANDFIELD of the since hash)",
              (command("HRANDFIELD", OWN.fair_since, 1000, "WITHVALUES"),),
              "refused", "refused", "allowed", "allowed", "allowed"),
    Operation("Read a fair share key's backlog (LLEN of its list)",
              (command("LLEN", OWN.fair_list("acme")),),
              "allowed", "allowed", "allowed", "refused", "refused"),
    Operation("Send a heartbeat with its jobs in progress and concurrency (heartbeat script)",
              (script("queue_heartbeat", [OWN.workers, OWN.worker_jobs, OWN.worker_concurrency],
                      ["w2", "beat", 60_000, 3, 8]),),
              "refused", "allowed", "refused", "refused", "refused"),
    Operation("Read each worker's concurrency (HGETALL of the worker_concurrency hash)",
              (command("HGETALL", OWN.worker_concurrency),),
              "refused", "allowed", "refused", "allowed", "allowed"),
    Operation("Record the minute's history sample (history script: XADD, trimmed in the "
              "same call)",
              (script("queue_history",
                      [OWN.history, OWN.stats, OWN.queued, OWN.waiting, OWN.processing,
                       OWN.delayed, OWN.dead], ["", 1440, "enqueued", "completed"]),),
              "refused", "allowed", "refused", "refused", "refused"),
    Operation("Read the per-minute history (XRANGE of the history stream)",
              (command("XRANGE", OWN.history, "-", "+", "COUNT", 60),),
              "refused", "refused", "refused", "allowed", "allowed"),
    Operation("Trim or delete the history (XTRIM, XDEL, DEL of the history stream)",
              (command("XTRIM", OWN.history, "MAXLEN", 0), command("XDEL", OWN.history, "1-0"),
               command("DEL", OWN.history)),
              "refused", "refused", "refused", "refused", "refused"),
    Operation("Count and page worker heartbeats (ZCOUNT, ZSCAN of the workers set)",
              (command("ZCOUNT", OWN.workers, 0, "+inf"), command("ZSCAN", OWN.workers, 0)),
              "refused", "refused", "refused", "allowed", "allowed"),
    Operation("Read the oldest waiting job (ZRANGE of the waiting and arrival sets)",
              (command("ZRANGE", OWN.waiting, 0, 0, "WITHSCORES"),
               command("ZRANGE", OWN.arrivals, 0, 0, "WITHSCORES")),
              "refused", "refused", "allowed", "allowed", "allowed"),
    Operation("Discover agent types (SCARD, SSCAN jobs:types)",
              (command("SCARD", QueueKeys.types_key()),
               command("SSCAN", QueueKeys.types_key(), 0)),
              "refused", "refused", "allowed", "allowed", "allowed"),
    Operation("Check that Redis has seen an agent type (SISMEMBER jobs:types)",
              (command("SISMEMBER", QueueKeys.types_key(), "billing"),),
              "refused", "refused", "refused", "allowed", "allowed"),
    Operation("Follow completion events (PSUBSCRIBE agent:*:completed)", (_psubscribe,),
              "allowed", "refused", "refused", "refused", "refused"),
    Operation("List the job ids waiting in a queue (LRANGE)",
              (command("LRANGE", OWN.queue, 0, -1),),
              "refused", "allowed", "refused", "allowed", "allowed"),
    Operation("Page running, dead, waiting and delayed jobs and leases (LRANGE, "
              "ZRANGEBYSCORE, ZSCORE)",
              (command("LRANGE", OWN.processing, 0, -1), command("LRANGE", OWN.dead, 0, -1),
               command("ZRANGEBYSCORE", OWN.waiting, "-inf", "+inf", "LIMIT", 0, 20),
               command("ZRANGEBYSCORE", OWN.delayed, "-inf", "+inf", "LIMIT", 0, 20),
               command("ZSCORE", OWN.leases, "r1")),
              "refused", "allowed", "refused", "allowed", "allowed"),
    Operation("Take a job (LMOVE queue to processing)",
              (command("LMOVE", OWN.queue, OWN.processing, "RIGHT", "LEFT"),),
              "refused", "allowed", "refused", "refused", "refused"),
    Operation("Claim, renew, complete or fail a job (here: the complete script)",
              (complete(OWN, "r1"),),
              "refused", "allowed", "refused", "refused", "refused"),
    Operation("Report a running job's progress (progress script: PUBLISH on its type's "
              "progress channel, HSET of its job hash)", (report_progress(OWN, "r1"),),
              "refused", "allowed", "refused", "refused", "refused"),
    Operation("Publish progress of its type (PUBLISH agent:<type>:progress)",
              (command("PUBLISH", OWN.progress_channel, "{}"),),
              "refused", "allowed", "refused", "refused", "refused"),
    Operation("Follow progress events of its type (SUBSCRIBE agent:<type>:progress)",
              (_subscribe_progress,),
              "allowed", "refused", "refused", "refused", "refused"),
    Operation("Write a result (SET)", (command("SET", OWN.result("r1"), '{"forged": 1}'),),
              "gap", "allowed", "refused", "refused", "gap", note=5),
    Operation("Publish a completion of its type (PUBLISH)",
              (command("PUBLISH", OWN.channel, "r1"),),
              "gap", "allowed", "refused", "refused", "gap", note=5),
    Operation("Requeue a dead letter (dead-letter requeue script)", (dead_requeue(OWN, "d1"),),
              "refused", "allowed", "refused", "refused", "allowed"),
    Operation("Purge a dead letter (dead-letter purge script)",
              (script("queue_dead_purge", [OWN.dead, OWN.job("d1"), OWN.result("d1")],
                      ["dead", "", "d1"]),),
              "refused", "allowed", "refused", "refused", "allowed"),
    Operation("Pause or resume its agent type (pause script)",
              (pause_and_resume(OWN),),
              "refused", "refused", "refused", "refused", "allowed"),
    Operation("Ask a running job's cancel by hand (HSET of its type's cancels hash)",
              (command("HSET", OWN.cancels, "r1", "a reason"),),
              "allowed", "refused", "refused", "refused", "allowed"),
    Operation("Cancel a job of its agent type (cancel script)", (cancel(OWN, "c1"),),
              "allowed", "refused", "refused", "refused", "allowed"),
    Operation("Read whether its agent type is paused (GET of the paused key)",
              (command("GET", OWN.paused),),
              "allowed", "allowed", "allowed", "allowed", "allowed"),
    Operation("Set or lift its agent type's limits (limits script, HSET and HDEL of the "
              "limits key)",
              (script("queue_limits", [OWN.limits], ["max_running", "5", "burst", ""]),
               command("HSET", OWN.limits, "rate", "5"), command("HDEL", OWN.limits, "rate")),
              "refused", "refused", "refused", "refused", "allowed"),
    Operation("Read its agent type's limits (HGETALL of the limits key)",
              (command("HGETALL", OWN.limits),),
              "refused", "allowed", "refused", "allowed", "allowed"),
    Operation("Spend its agent type's rate (SET of the rate key, as the claim writes it)",
              (command("SET", OWN.rate, "1800000000000.000", "PX", 1000),),
              "refused", "allowed", "refused", "refused", "refused"),
    Operation("Use its JobStore agent's records (create script, HGETALL, SCAN MATCH)",
              (store_create(OWN_STORE, "s2"), command("HGETALL", OWN_STORE.record("s1")),
               command("SCAN", 0, "MATCH", OWN_STORE.scan_pattern())),
              "allowed", "allowed", "refused", "refused", "refused"),
    # The injections a role must not manage, and their neighbours.
    Operation("Delete a queue or the counters (DEL)",
              (command("DEL", OWN.queue), command("DEL", OWN.stats)),
              "refused", "refused", "refused", "refused", "refused"),
    Operation("Overwrite a queue structure with SET (the queue, the stats hash)",
              (command("SET", OWN.queue, "x"), command("SET", OWN.stats, "x")),
              "refused", "refused", "refused", "refused", "refused"),
    Operation("Delete a job hash of its type (DEL)", (command("DEL", OWN.job("d1")),),
              "gap", "allowed", "refused", "refused", "allowed", note=5),
    Operation("Delete a result of its type (DEL)", (command("DEL", OWN.result("done1")),),
              "refused", "allowed", "refused", "refused", "allowed"),
    Operation("Set or drop the TTL of the queue, the queued hash or the stats hash (EXPIRE, "
              "PEXPIRE, PERSIST)",
              tuple(command(verb, key, *ttl) for key in (OWN.queue, OWN.queued, OWN.stats)
                    for verb, *ttl in (("EXPIRE", 1), ("PEXPIRE", 200), ("PERSIST",))),
              "refused", "refused", "refused", "refused", "refused"),
    Operation("Delete a counter (HDEL of the stats hash)",
              (command("HDEL", OWN.stats, "enqueued", "failed"),),
              "refused", "refused", "refused", "refused", "refused"),
    Operation("Set a TTL on a job hash (EXPIRE, PEXPIRE)",
              (command("EXPIRE", OWN.job("d1"), 60), command("PEXPIRE", OWN.job("d1"), 60_000)),
              "refused", "allowed", "refused", "refused", "refused"),
    Operation("Drop a job hash's TTL (PERSIST)", (command("PERSIST", OWN.job("d1")),),
              "refused", "allowed", "refused", "refused", "allowed"),
    Operation("Trim or pop a queue (LTRIM, LPOP, RPOP)",
              (command("LTRIM", OWN.queue, 1, 0), command("LPOP", OWN.queue),
               command("RPOP", OWN.queue)),
              "refused", "refused", "refused", "refused", "refused"),
    Operation("Remove a job from the queue list (LREM)", (command("LREM", OWN.queue, 0, "q1"),),
              "refused", "gap", "refused", "refused", "refused", note=1),
    Operation("Drop a waiting job from the queued hash or the expiry set without a result "
              "(HDEL, ZREM)",
              (command("HDEL", OWN.queued, "p1"), command("ZREM", OWN.expiry, "q1")),
              "gap", "gap", "refused", "refused", "gap", note=5),
    Operation("Forge a counter (HINCRBY stats completed 1000000)",
              (command("HINCRBY", OWN.stats, "completed", 1_000_000),),
              "gap", "gap", "refused", "refused", "gap", note=1),
    # (LPUSH of its id alone does not: the claim skips an entry of a running job. A job
    # hash without a state is a queued job's, which the claim runs.)
    Operation("Re-run a running job (HDEL its state, then LPUSH its id)",
              (command("HDEL", OWN.job("r1"), "state"),),
              "refused", "gap", "refused", "refused", "gap", note=1),
    # (The operator has no HSET of a job hash: it sets a number with HDEL, then HINCRBY.)
    Operation("Force-expire a claimed job (HDEL and HINCRBY its expires_at to 1)",
              (command("HDEL", OWN.job("q1"), "expires_at"),
               command("HINCRBY", OWN.job("q1"), "expires_at", 1)),
              "refused", "gap", "refused", "refused", "gap", note=1),
    Operation("Force-expire a waiting job that has a job hash (HSET its expires_at to 1)",
              (command("HSET", OWN.job("q1"), "expires_at", 1),),
              "gap", "gap", "refused", "refused", "refused", note=1),
    Operation("Inject a job: a new job hash with its payload (HSET), its id in the expiry "
              "and delayed sets (ZADD), for the promoter to queue", (inject(OWN, "x1"),),
              "gap", "gap", "refused", "refused", "refused", note=1),
    Operation("Rewrite a running job's fields, e.g. its lease token (HSET of its job hash)",
              (command("HSET", OWN.job("r1"), "token", "forged"),),
              "gap", "gap", "refused", "refused", "refused", note=1),
    Operation("Force-expire a waiting job (HSET its packed field in the queued hash)",
              (command("HSET", OWN.queued, "q1", "0,0,1,1,forged\n\n{}"),),
              "gap", "gap", "refused", "refused", "refused", note=1),
    Operation("Run any Lua (EVAL; an endless loop makes Redis answer BUSY to everyone)",
              (command("EVAL", "return 1", 0),),
              "gap", "gap", "refused", "refused", "gap", note=2),
    Operation("Run read-only Lua or a function (EVAL_RO, EVALSHA_RO, FCALL_RO)",
              (command("EVAL_RO", "return 1", 0),
               command("EVALSHA_RO", Script.named("queue_enqueue").sha, 0),
               command("FCALL_RO", "snapshot", 0)),
              "refused", "refused", "refused", "refused", "refused"),
    Operation("Load a script or a function (SCRIPT LOAD, FUNCTION LOAD)",
              (command("SCRIPT", "LOAD", "return 1"),
               command("FUNCTION", "LOAD", "#!lua name=x\nredis.register_function('f', "
                       "function() return 1 end)")),
              "refused", "refused", "refused", "refused", "refused"),
    Operation("Enqueue to, or read a job or result of, another agent type",
              (enqueue(OTHER, "n2"), command("HGETALL", OTHER.job("q1")),
               command("GET", OTHER.result("done1"))),
              "refused", "refused", "refused", "refused", "refused"),
    Operation("Take, complete, report progress of or publish another agent type's jobs",
              (command("LMOVE", OTHER.queue, OTHER.processing, "RIGHT", "LEFT"),
               complete(OTHER, "r1"), command("SET", OTHER.result("r1"), "{}"),
               report_progress(OTHER, "r1"),
               command("PUBLISH", progress_channel("flights"), "{}")),
              "refused", "refused", "refused", "refused", "refused"),
    Operation("Requeue or purge another agent type's dead letters",
              (dead_requeue(OTHER, "d1"),
               script("queue_dead_purge", [OTHER.dead, OTHER.job("d1"), OTHER.result("d1")],
                      ["dead", "", "d1"])),
              "refused", "refused", "refused", "refused", "refused"),
    Operation("Pause or resume another agent type (pause script, SET or DEL of its paused "
              "key)",
              (pause_and_resume(OTHER), command("SET", OTHER.paused, "1"),
               command("DEL", OTHER.paused)),
              "refused", "refused", "refused", "refused", "refused"),
    Operation("Set another agent type's limits or rate (limits script, HSET, SET)",
              (script("queue_limits", [OTHER.limits], ["max_running", "5"]),
               command("HSET", OTHER.limits, "max_running", "5"),
               command("SET", OTHER.rate, "1", "PX", 1000)),
              "refused", "refused", "refused", "refused", "refused"),
    Operation("Cancel another agent type's job (cancel script)", (cancel(OTHER, "c1"),),
              "refused", "refused", "refused", "refused", "refused"),
    Operation("Publish a completion of another agent type (PUBLISH)",
              (command("PUBLISH", completion_channel("flights"), "r1"),),
              "refused", "refused", "refused", "refused", "refused"),
    Operation("Read or write another JobStore agent's records",
              (command("HGETALL", OTHER_STORE.record("s1")),
               command("HSET", OTHER_STORE.record("s1"), "status", "succeeded"),
               store_create(OTHER_STORE, "s9")),
              "refused", "refused", "refused", "refused", "refused"),
    Operation("Register another agent type's name (SADD jobs:types flights)",
              (command("SADD", QueueKeys.types_key(), "flights", "made-up"),),
              "gap", "gap", "refused", "refused", "refused", note=4),
    Operation("List every key name (SCAN without MATCH)", (command("SCAN", 0),),
              "gap", "gap", "refused", "refused", "refused", note=3),
    Operation("List keys (KEYS)", (command("KEYS", "*"),),
              "refused", "refused", "refused", "refused", "refused"),
    Operation("Read Redis' memory and eviction policy (INFO memory)",
              (command("INFO", "memory"),),
              "allowed", "allowed", "allowed", "allowed", "allowed"),
    Operation("Administer Redis (FLUSHALL, CONFIG, ACL, SCRIPT FLUSH, CLIENT LIST)",
              (command("FLUSHALL"), command("CONFIG", "GET", "*"), command("ACL", "LIST"),
               command("SCRIPT", "FLUSH"), command("CLIENT", "LIST")),
              "refused", "refused", "refused", "refused", "refused"),
    Operation("Write outside the package's keys (SET unrelated:key)",
              (command("SET", "unrelated:key", "2"),),
              "refused", "refused", "refused", "refused", "refused"),
)  # fmt: skip

_MARK = {"allowed": "allowed", "refused": "refused"}


def matrix_markdown() -> str:
    """The table docs/operations.md shows between the acl-matrix markers."""
    lines = [
        "| Operation | " + " | ".join(ROLE_NAMES) + " |",
        "|---|" + "---|" * len(ROLE_NAMES),
    ]
    for operation in OPERATIONS:
        cells = [
            _MARK.get(cell, f"allowed, see note {operation.note}")
            for cell in (operation.cell(role) for role in ROLE_NAMES)
        ]
        lines.append(f"| {operation.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def test_docs_show_this_matrix() -> None:
    text = DOCS.read_text(encoding="utf-8")
    block = re.search(r"<!-- acl-matrix:start -->\n(.*)<!-- acl-matrix:end -->", text, re.S)
    assert block is not None, "docs/operations.md lost its acl-matrix markers"
    assert block.group(1) == matrix_markdown(), (
        "docs/operations.md is stale: paste this between the acl-matrix markers:\n"
        + matrix_markdown()
    )


def test_every_gap_has_a_note_and_every_note_a_gap() -> None:
    for operation in OPERATIONS:
        gaps = [role for role in ROLE_NAMES if operation.cell(role) == "gap"]
        assert (operation.note is not None) == bool(gaps), operation.name
    text = DOCS.read_text(encoding="utf-8")
    for note in {o.note for o in OPERATIONS if o.note is not None}:
        assert re.search(rf"^{note}\. \*\*", text, re.M), f"docs/operations.md lacks note {note}"


# -- running the matrix ------------------------------------------------------------------
def role_users() -> list[str]:
    """Every role, scoped to OWN's type and store agent where it is scoped at all
    (tests/redis/conftest.py starts the server)."""
    users = []
    for role in ROLE_NAMES:
        scope: dict[str, Any] = {}
        if acl.ROLES[role].scoped:
            scope["agent_types"] = [OWN.agent_type]
        if acl.ROLES[role].uses_store:
            scope["store_agents"] = [OWN_STORE.agent]
        users.append(acl.acl_file_line(role, PASSWORD, role, **scope).removeprefix("user "))
    return users


@pytest.fixture
async def admin(admin: aioredis.Redis) -> AsyncIterator[aioredis.Redis]:
    """The folder's admin client (an empty keyspace), scripts flushed and the matrix's
    keys seeded."""
    await admin.script_flush()
    await _seed(admin)
    yield admin


async def _seed(admin: aioredis.Redis) -> None:
    """Both types hold a queued, a running, a dead and a finished job, as the queue
    writes them; both JobStore agents hold a record; one key belongs to nobody."""
    for keys in (OWN, OTHER):
        deadline = NOW_MS + 60_000
        job = {"payload": PAYLOAD, "enqueued_at": NOW_MS, "expires_at": deadline, "ttl": 60,
               "max_attempts": 3}  # fmt: skip
        await admin.hset(keys.job("q1"), mapping=job)
        await admin.hset(
            keys.job("r1"),
            mapping={
                **job,
                "state": "running",
                "token": "token-r1",
                "attempts": 1,
                "started_at": NOW_MS,
            },  # as the claim writes it
        )
        await admin.hset(keys.job("d1"), mapping={**job, "state": "dead", "attempts": 3})
        await admin.lpush(keys.queue, "q1", "p1")
        # p1 waits packed (queue/envelope.py); the matrix only needs the field there.
        await admin.hset(keys.queued, "p1", f"{NOW_MS},{deadline},60,3,\n\n{{}}")
        await admin.lpush(keys.processing, "r1")
        await admin.zadd(keys.leases, {"r1": deadline})
        await admin.zadd(keys.expiry, {"q1": deadline, "r1": deadline})
        await admin.lpush(keys.dead, "d1")
        await admin.hset(keys.stats, mapping={"enqueued": 3, "started": 2, "failed": 1})
        await admin.set(keys.result("done1"), '{"status":"succeeded","result":1,"error":null}')
        await admin.zadd(keys.workers, {"w1": NOW_MS})
        await admin.hset(keys.worker_jobs, mapping={"w1": 1})
        # Fair share: a key waiting on its list, since when it has had no start.
        await admin.lpush(keys.fair_list("acme"), "f1")
        await admin.hset(keys.fair_since, "acme", str(NOW_MS))
        # A sample of long ago: the history script of the matrix writes its own after it.
        await admin.xadd(keys.history, {"at": 60_000, "enqueued": 3}, id="60000-0")
        await admin.sadd(QueueKeys.types_key(), keys.agent_type)
    for store in (OWN_STORE, OTHER_STORE):
        await admin.hset(store.record("s1"), mapping={"status": "pending", "payload": PAYLOAD})
    await admin.set("unrelated:key", "1")


async def _everything(admin: aioredis.Redis) -> dict[str, bytes]:
    """Every key's DUMP: a refused operation must leave all of them as they were."""
    return {key: await admin.dump(key) for key in await admin.keys("*")}


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:48]


def _refused(error: Exception) -> bool:
    # Direct commands answer NOPERM; a script's own refused command answers an error
    # naming the user executing the script (command, key or channel).
    if isinstance(error, NoPermissionError):
        return True
    return isinstance(error, ResponseError) and "user executing the script can't" in str(error)


@pytest.mark.parametrize("role", ROLE_NAMES)
@pytest.mark.parametrize("operation", OPERATIONS, ids=[_slug(o.name) for o in OPERATIONS])
async def test_each_role_gets_exactly_its_cell(
    acl_server: RedisServer, admin: aioredis.Redis, operation: Operation, role: str
) -> None:
    before = await _everything(admin)
    client = aioredis.Redis.from_url(acl_server.url_for(role, PASSWORD), decode_responses=True)
    outcomes: list[str] = []
    try:
        for step in operation.steps:
            try:
                await step(client)
            except Exception as error:  # each outcome is classified: refusal or failure
                assert _refused(error), f"{operation.name}: not a refusal: {error!r}"
                outcomes.append("refused")
            else:
                outcomes.append("allowed")
    finally:
        await client.aclose()
    expected = operation.cell(role)
    if expected == "refused":
        assert outcomes == ["refused"] * len(operation.steps), outcomes
        assert await _everything(admin) == before, "a refused operation changed a key"
    else:  # "allowed", or "gap": allowed, and the docs say why an ACL cannot refuse it
        assert outcomes == ["allowed"] * len(operation.steps), outcomes


@pytest.mark.parametrize("corrupt", ["enqueued counter", "arrivals set"])
async def test_a_producers_refused_enqueue_undoes_its_arrival_count_under_its_acl(
    acl_server: RedisServer, admin: aioredis.Redis, corrupt: str
) -> None:
    """The enqueue script writes the arrival count first and undoes it (HINCRBY back,
    HDEL, ZREM) when the stats counter or the arrivals set turns out corrupt: the undo
    must run as the producer too, or the refusal would be a permission error with the
    count left behind."""
    if corrupt == "enqueued counter":
        await admin.hset(OWN.stats, "enqueued", "not a number")
    else:
        await admin.set(OWN.arrivals, "not a sorted set")
    before = await _everything(admin)
    client = aioredis.Redis.from_url(
        acl_server.url_for("producer", PASSWORD), decode_responses=True
    )
    try:
        with pytest.raises(ResponseError, match=r"^CORRUPT (2|5) ") as info:
            await enqueue(OWN, "n1")(client)
    finally:
        await client.aclose()
    assert not _refused(info.value), info.value
    assert await _everything(admin) == before
