"""Least-privilege Redis ACL rules for the package's roles: producer, worker, exporter,
and for the operator tools (CLI and console) reader and operator.

Each role is a Redis 7 ACL user whose root permissions hold only keyless commands (the
connection handshake, TIME, SCAN, pub/sub) and whose every keyed command sits in a
selector, `(+command ... ~pattern ...)`, that binds it to the key kinds it needs: the
producer may LPUSH the queue list but not DEL it, the exporter may HGETALL the stats
hash but not a job hash. The commands a role's Lua scripts call are checked against
these grants (Redis checks a script's `redis.call` against the caller's ACL too):
`ungranted_script_commands()` must stay empty, so a script that starts using a new
command fails a test instead of a deployment. Every role but the exporter can be scoped
to its agent types (`agent_types=`), producers and workers to their JobStore agents too
(`store_agents=`); unscoped, every type and agent matches. docs/operations.md shows the
rendered rules, what Redis ACLs cannot express, and the role matrix that
tests/redis/test_acl_roles.py proves.

    ACL SETUSER producer reset on >secret <rules("producer")...>
"""

from __future__ import annotations

import hashlib
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Literal, TypedDict

from .keys import (
    COMPLETION_PATTERN,
    PROGRESS_PATTERN,
    QUEUE_PREFIX,
    STORE_PREFIX,
    completion_channel,
    progress_channel,
)
from .redis.script import lua_source
from .validation import validate_name

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack of kwargs is Python 3.12+

__all__ = [
    "CONNECT_COMMANDS",
    "ROLES",
    "AclRole",
    "Grant",
    "KeyPattern",
    "RuleOptions",
    "acl_file_line",
    "markdown",
    "rules",
    "script_commands",
    "setuser_command",
    "ungranted_script_commands",
]

# What any redis-py client may send just to connect and find its way: PING for health
# checks, CLIENT SETNAME, and the topology commands a RedisCluster client needs
# (COMMAND for key positions, CLUSTER SLOTS/SHARDS for the slot map, ASKING during
# resharding). redis-py also sends CLIENT SETINFO, which Redis 7.0 does not know (and
# an ACL naming it would not load); redis-py ignores the error either way.
CONNECT_COMMANDS = ("ping", "client|setname", "command", "cluster|slots", "cluster|shards",
                    "cluster|nodes", "asking", "readonly")  # fmt: skip

_CALL = re.compile(r"redis\.p?call\(\s*['\"]([A-Za-z_]+)['\"]")


@cache
def script_commands(script: str) -> frozenset[str]:
    """Lower-case names of the commands `lua/<script>.lua` calls."""
    return frozenset(name.lower() for name in _CALL.findall(lua_source(script)))


@dataclass(frozen=True, slots=True)
class KeyPattern:
    """One kind of key: `space` says which prefix (and which scope) it lives under."""

    space: Literal["queue", "types", "store"]
    """"queue": `<queue prefix>:{<agent type>}:<suffix>`; "types": the discovery set
    `<queue prefix>:types`; "store": `<store prefix>:{<agent>}:<suffix>`."""
    suffix: str = ""
    write: bool = False
    """`~` (read and write) when True, else `%R~` (read only)."""

    def render(self, prefixes: Mapping[str, str], scope: Mapping[str, Sequence[str]]) -> list[str]:
        access = "~" if self.write else "%R~"
        if self.space == "types":
            return [f"{access}{prefixes['queue']}:types"]
        names = scope["types"] if self.space == "queue" else scope["agents"]
        # The braces are the key layout's hash tags, not placeholders.
        return [f"{access}{prefixes[self.space]}:{{{name}}}:{self.suffix}" for name in names]


def _read(*suffixes: str) -> tuple[KeyPattern, ...]:
    """The queue keys of these suffixes, as keys a command may only read."""
    return tuple(KeyPattern("queue", suffix) for suffix in suffixes)


def _written(*suffixes: str) -> tuple[KeyPattern, ...]:
    """The queue keys of these suffixes, as keys a command may write."""
    return tuple(KeyPattern("queue", suffix, write=True) for suffix in suffixes)


_TYPES = KeyPattern("types", write=True)
_STORE = KeyPattern("store", "*", write=True)


@dataclass(frozen=True, slots=True)
class Grant:
    """Commands allowed on some kinds of key: one Redis 7 ACL selector."""

    commands: tuple[str, ...]
    keys: tuple[KeyPattern, ...]

    def render(self, prefixes: Mapping[str, str], scope: Mapping[str, Sequence[str]]) -> str:
        tokens = [f"+{command}" for command in sorted(self.commands)]
        tokens += [pattern for key in self.keys for pattern in key.render(prefixes, scope)]
        return f"({' '.join(tokens)})"


@dataclass(frozen=True, slots=True)
class AclRole:
    """What one kind of process may do: keyless commands at the root, keyed ones in
    grants (selectors), completion channels by scope."""

    name: str
    summary: str
    scripts: tuple[str, ...]
    """Lua scripts the role runs (EVALSHA, then EVAL after NOSCRIPT)."""
    keyless: tuple[str, ...]
    """Commands without keys it sends or its scripts call, besides CONNECT_COMMANDS."""
    grants: tuple[Grant, ...]
    channels: Literal["none", "every type", "own types"]
    """Completion and progress channels: none, the (P)SUBSCRIBE patterns of every type,
    or its types' own (a worker PUBLISHes there, and nowhere else)."""
    scoped: bool
    """Whether agent_types narrows its keys (every role but the exporter)."""
    publishes_completions: bool = False
    """PUBLISH on its types' completion channels only, in a selector of its own (the
    cancel script's event): the root's channels may hold the progress ones too, which a
    root +publish would open (a false progress event)."""

    @property
    def uses_store(self) -> bool:
        """Whether it has JobStore keys, which store_agents narrows (producer, worker)."""
        return any(key.space == "store" for grant in self.grants for key in grant.keys)

    def all_commands(self) -> tuple[str, ...]:
        names = set(CONNECT_COMMANDS) | set(self.keyless)
        if self.publishes_completions:
            names.add("publish")
        for grant in self.grants:
            names |= set(grant.commands)
        return tuple(sorted(names))

    def rules(
        self,
        *,
        queue_prefix: str = QUEUE_PREFIX,
        store_prefix: str = STORE_PREFIX,
        agent_types: Iterable[str] | None = None,
        store_agents: Iterable[str] | None = None,
    ) -> list[str]:
        """ACL rule tokens (after `ACL SETUSER <name> reset on >password`); each selector
        is one token, `(...)`, as ACL SETUSER takes it."""
        if not self.scoped and (agent_types is not None or store_agents is not None):
            raise ValueError(f"the {self.name} role reads every agent type: it takes no scope")
        if not self.uses_store and store_agents is not None:
            raise ValueError(f"the {self.name} role uses no JobStore: it takes no store_agents")
        scope = {
            "types": _names(agent_types, "agent_types"),
            "agents": _names(store_agents, "store_agents"),
        }
        # By the queue's own rule for its prefix (QueueSettings): no glob character (`*`
        # would match every prefix's keys) and no space (it would split a rule in two).
        prefixes = {
            "queue": validate_name(queue_prefix, "queue_prefix"),
            "store": validate_name(store_prefix, "store_prefix"),
        }
        keyless = sorted(set(CONNECT_COMMANDS) | set(self.keyless))
        channels = {
            "none": [],
            "every type": [COMPLETION_PATTERN, PROGRESS_PATTERN],
            "own types": [
                channel
                for name in scope["types"]
                for channel in (completion_channel(name), progress_channel(name))
            ],
        }[self.channels]
        tokens = [
            "-@all",
            *(f"+{command}" for command in keyless),
            *(f"&{channel}" for channel in channels),
            *(grant.render(prefixes, scope) for grant in self.grants),
        ]
        if self.publishes_completions:
            own = " ".join(f"&{completion_channel(name)}" for name in scope["types"])
            tokens.append(f"(+publish {own})")
        return tokens


def _names(names: Iterable[str] | None, field: str) -> list[str]:
    if names is None:
        return ["*"]  # unscoped: every agent type (or agent) matches
    # validate_name admits no glob character (* ? [ ] \), so a name matches only itself.
    checked = list(dict.fromkeys(validate_name(name, field) for name in names))
    if not checked:
        raise ValueError(f"{field} is empty: give at least one name, or None for all")
    return checked


# The index scripts too: a page read repairs stale entries, and sweep_time_index and
# the backfill run with the application's own user.
_STORE_SCRIPTS = ("store_create", "store_update", "store_delete", "store_index_repair",
                  "store_index_backfill")  # fmt: skip
# Direct JobStore reads: get/exists (HGETALL, EXISTS), the owner before a delete (HGET),
# index rows (HMGET), index pages and the sweep (ZREVRANGEBYLEX, ZRANGEBYLEX); list_ids'
# SCAN is keyless and sits at the root.
_STORE_READS = ("exists", "hget", "hgetall", "hmget", "zrangebylex", "zrevrangebylex")
# EVALSHA, and EVAL for the one re-run after NOSCRIPT (flush, restart, failover). EVAL
# accepts any Lua source: see "What Redis ACLs cannot express" in docs/operations.md.
_SCRIPTING = ("evalsha", "eval")


def _called(scripts: Iterable[str]) -> set[str]:
    return set().union(*(script_commands(script) for script in scripts))


# The JobStore's own namespace: its scripts, its reads, nothing of the queue's.
_STORE_GRANT = Grant(
    tuple(sorted((_called(_STORE_SCRIPTS) - {"time"}) | set(_SCRIPTING) | set(_STORE_READS))),
    (_STORE,),
)


# queue_progress is a handler's progress report (HSET of its job hash, PUBLISH);
# queue_enqueue is there because operators requeue and re-enqueue with the worker user.
_WORKER_SCRIPTS = (
    "queue_claim", "queue_complete", "queue_fail", "queue_renew", "queue_heartbeat",
    "queue_history", "queue_promote", "queue_reap_scan", "queue_expire",
    "queue_expire_queued", "queue_expire_tail", "queue_dead_requeue", "queue_dead_purge",
    "queue_kept_prune", "queue_progress", "queue_enqueue",
)  # fmt: skip


# What a worker reads, on any key of its types (read only): its own plain reads (BLMOVE's
# pages, depths and counters, job state, results, the cleanup's candidates, a refusal's
# TYPE of each key), and its scripts' reads, TYPE checks first.
_WORKER_READS = (
    "exists", "get", "hexists", "hget", "hgetall", "hlen", "hmget", "llen", "lrange",
    "type", "zcard", "zrangebyscore", "zscore",
)  # fmt: skip

# What its scripts (and BLMOVE) write, each command on the kinds of key they write it to,
# and nothing else: no TTL, no field deletion and no HSET on the queue list, the queued
# hash or the stats hash, whose loss would take waiting jobs or the counters with it.
_WORKER_WRITES = (
    # Take (BLMOVE, the claim's LMOVE): one command spans both lists. `queue:*` are the
    # priority levels' lists (keys.py), taken, pushed and expired as the queue list is.
    Grant(("blmove", "lmove"), _written("queue", "queue:*", "processing", "fair:q:*")),
    # Entries leave processing (claim, complete, fail, expiry, reaper), the dead and failed
    # lists (requeue, purge, pruning) and the queue list (its tail's expiry scan).
    Grant(("lrem",), _written("queue", "queue:*", "processing", "dead", "failed")),
    # In: the queue list (enqueue, requeue, retry, promotion, reaper), the dead and failed
    # lists (fail), an expiry bucket of `queued` (enqueue); a past bucket is trimmed.
    Grant(("lpush",), _written("queue", "queue:*", "dead", "failed")),
    Grant(("rpush",), _written("queue", "queue:*", "expiring:*")),
    Grant(("ltrim",), _written("expiring:*")),
    # Fair share (lua/include/fair_keys.lua, fair_turns.lua): a job onto its key's list, a key
    # into the ring (enqueue, retry); the ring's turn order rewritten (LTRIM, LPUSH) and the ring
    # gone with its last key (claim); a key's running set (claim: ZADD, a day's PEXPIRE, ZREM of
    # entries whose lease is gone).
    Grant(("lpush", "rpush"), _written("fair", "fair:q:*")),
    # (One DEL takes the ring and its `since` hash: one selector must hold both.)
    Grant(("ltrim",), _written("fair")),
    Grant(("del",), _written("fair", "fair:since")),
    Grant(("hset", "hdel"), _written("fair:since")),
    Grant(("zadd", "zrem", "pexpire"), _written("fair:r:*")),
    # Its reads: a key's running set, whose members still leased (ZMSCORE of the leases),
    # and whether only the queue list's turn is left in the ring.
    Grant(("zrange",), _read("fair:r:*")),
    Grant(("zmscore",), _read("leases")),
    Grant(("lindex",), _read("fair")),
    # Fields: job hashes (claim, complete, fail, requeue), a take's marker, a packed job of
    # `queued` (enqueue in, claim and expiry out), arrival counts (in and out), each
    # worker's jobs in progress and concurrency (heartbeat).
    Grant(("hset",), _written("job:*", "take:*", "queued", "worker_jobs", "worker_concurrency")),
    # HDEL of those, of the arrival counts, and of a settled cancel request (complete,
    # fail, reaper).
    Grant(
        ("hdel",),
        _written(
            "job:*", "take:*", "queued", "arrived", "worker_jobs", "worker_concurrency", "cancels"
        ),
    ),
    # Counters and the latency histograms; arrival counts; a requeued job's numbers.
    Grant(("hincrby",), _written("stats", "arrived", "job:*")),
    Grant(("hincrbyfloat",), _written("stats")),
    Grant(
        ("zadd", "zrem"),
        _written("leases", "expiry", "waiting", "delayed", "arrivals", "expiring", "workers"),
    ),
    Grant(("zremrangebyscore",), _written("workers")),
    # The minute's history sample (XADD trims the stream in the same call), after a look
    # at the newest entry.
    Grant(("xadd", "xrevrange"), _written("history")),
    # Cancel (queue/cancel.py): the control stream read (worker/cancel_watch.py).
    Grant(("xread", "xrevrange"), _read("control")),
    # Only records and results are ever deleted (claim, expiry, purge, pruning); SET writes
    # results and (re-enqueueing, see _WORKER_SCRIPTS) the deadline mark.
    Grant(("del",), _written("job:*", "result:*")),
    Grant(("set",), _written("result:*", "deadline_mark")),
    # The rate limit's state (the claim's GCRA, queue/limits.py): SET with PX, nothing else.
    # The limits hash itself is only read (HMGET above): the operator role writes it.
    Grant(("set",), _written("rate")),
    # TTLs: a finished job's record (complete: EXPIRE, fail: PEXPIRE), a take's marker
    # (claim), and a requeued dead letter's record, live again (PERSIST).
    Grant(("expire",), _written("job:*", "take:*")),
    Grant(("pexpire", "persist"), _written("job:*")),
)


# What the operator tools read (operations/: info, workers, job show, dead list/show, the
# dry runs, the console's pages), read only, each command on the keys it reads there:
# depths, counters, pages of lists and sets (the oldest waiting job is ZRANGE 0 0),
# heartbeats, leases, job records with their payloads (operators look at them), results.
_OPERATOR_READS = (
    Grant(("llen", "lrange"), _read("queue", "queue:*", "processing", "dead", "failed")),
    Grant(("zcard", "zrange", "zrangebyscore"), _read("waiting", "delayed")),
    # Waiting jobs still packed (queue/envelope.py): their count, their fields, and the
    # second the oldest of them arrived in.
    Grant(("hlen", "hget", "hmget"), _read("queued")),
    Grant(("zrange",), _read("arrivals")),
    Grant(("zcount", "zscan"), _read("workers")),
    # Each worker's concurrency, which its heartbeat writes (the workers page).
    Grant(("hgetall",), _read("worker_concurrency")),
    Grant(("zscore",), _read("leases")),
    Grant(("hgetall",), _read("stats")),
    Grant(("hget", "hgetall", "hmget"), _read("job:*")),
    # The per-minute history (the charts and info's windows without Prometheus).
    Grant(("xrange",), _read("history")),
    # A running job's pending cancel request (job show's "cancel asked").
    Grant(("hget",), _read("cancels")),
    # Results, and whether the type is paused (since when).
    Grant(("get",), _read("result:*", "paused")),
    # The type's limits (JobQueue.limits, agentjobs limits show).
    Grant(("hgetall",), _read("limits")),
    # Fair share's waits (agentjobs limits show): the keys waiting and since when, read
    # whole or, past 10,000 keys, sampled.
    Grant(("hlen", "hgetall", "hrandfield"), _read("fair:since")),
    # When Redis drops an ended job's record and result (job show's "kept until").
    Grant(("pexpiretime",), _read("job:*", "result:*")),
    # The types Redis has seen, read as the exporter reads them (the operator tools show
    # every one, and accept a name the registry holds).
    Grant(("scard", "sismember", "sscan"), (KeyPattern("types"),)),
)

# Cancel (queue/cancel.py): the cancel script with exactly the keys it declares, its reads
# and type checks, and its writes, each command on its one kind of key. A waiting job
# leaves `queued` (its arrival count down) or its sets, its record goes, its result is
# written; a running one gets an entry in the cancels hash (no job hash field is ever
# written) and in the control stream. cancel_session's scan script pages through
# `queued` and the expiry set and reads each job's payload.
_CANCEL_KEYS = ("queued", "waiting", "delayed", "expiry", "stats", "arrivals", "arrived",
                "control", "cancels")  # fmt: skip
_CANCEL_GRANTS = (
    Grant(_SCRIPTING, _written(*_CANCEL_KEYS, "job:*", "result:*")),
    Grant(("type",), _read(*_CANCEL_KEYS)),
    Grant(("hget", "hmget"), _read("queued", "stats", "arrived")),
    Grant(("hmget", "exists"), _read("job:*")),
    Grant(("getrange",), _read("result:*")),
    Grant(("hscan",), _read("queued")),
    Grant(("zscan",), _read("expiry")),
    Grant(("hdel",), _written("queued", "arrived")),
    # (HINCRBY of the stats hash and the arrival counts: each role's own grant has them)
    Grant(("zrem",), _written("arrivals", "waiting", "delayed", "expiry")),
    Grant(("del",), _written("job:*")),
    Grant(("hexists", "hset"), _written("cancels")),
    Grant(("set",), _written("result:*")),
    Grant(("xadd",), _written("control")),
)

# The keys the enqueue script declares (KEYS), each granted to EVALSHA as written:
# `queue:*` the priority levels' lists, `job:*` a scheduled job's hash (its HSET grant),
# `result:*` read only (by EXISTS), `fair` fair share's ring, the limits hash for its
# fair_by (HGET). The script's own commands are checked one by one all the same, and
# the producer has no write command on the limits hash. Then the keys whose type it
# checks before it writes.
_ENQUEUE_KEYS = ("queue", "queue:*", "stats", "queued", "expiring", "arrivals", "arrived",
                 "deadline_mark", "job:*", "result:*", "expiring:*", "delayed", "expiry",
                 "limits", "fair")  # fmt: skip
_ENQUEUE_CHECKED = ("queue", "queue:*", "queued", "expiring", "arrivals", "arrived",
                    "deadline_mark", "expiring:*", "job:*", "delayed", "expiry")  # fmt: skip

# The keys the operator's scripts declare (`fair`: fair share's ring, for a requeued job
# back on its key's list), and those whose type they check.
_OPERATOR_KEYS = ("dead", "failed", "queue", "queue:*", "expiry", "stats", "waiting", "job:*",
                  "result:*", "paused", "limits", "fair")  # fmt: skip
_OPERATOR_CHECKED = ("dead", "failed", "queue", "queue:*", "expiry", "stats", "waiting",
                     "job:*", "paused", "limits", "fair", "fair:q:*", "fair:since")  # fmt: skip

_OPERATOR_SCRIPTS = (
    "queue_dead_requeue", "queue_dead_purge", "queue_pause", "queue_limits", "queue_cancel",
    "queue_session_scan",
)  # fmt: skip

ROLES: dict[str, AclRole] = {
    role.name: role
    for role in (
        AclRole(
            name="producer",
            summary=(
                "enqueues jobs (scheduled ones too), cancels jobs of its agent types, "
                "reads results, job state, progress and depths, follows completion and "
                "progress events and uses the JobStore; cannot take, lease, complete or fail "
                "jobs, nor trim queue structures"
            ),
            scripts=("queue_enqueue", "queue_cancel", "queue_session_scan", *_STORE_SCRIPTS),
            keyless=(
                "time",  # every script reads Redis' clock
                "scan",  # JobStore.list_ids without the time index
                "info",  # the maxmemory-policy check at connect (INFO memory)
                "psubscribe",
                "punsubscribe",
                "subscribe",
                "unsubscribe",
            ),
            grants=(
                # The enqueue script, with exactly the keys it declares.
                Grant(_SCRIPTING, _written(*_ENQUEUE_KEYS)),
                *_CANCEL_GRANTS,
                # What the enqueue script writes, each command on its one kind of key
                # (keys.py: `queued`, the queue lists, expiry buckets, arrivals, the mark).
                Grant(("lpush",), _written("queue", "queue:*")),
                # Fair share: a job onto its key's list, a new key into the ring (and its
                # length read first), the type's fair_by read.
                Grant(("lpush",), _written("fair", "fair:q:*")),
                Grant(("hset",), _written("fair:since")),
                Grant(("llen", "type"), _read("fair", "fair:q:*", "fair:since")),
                Grant(("hget",), _read("limits")),
                Grant(("get", "set"), _written("deadline_mark")),
                Grant(("rpush",), _written("expiring:*")),
                # (HINCRBY of stats also by register_type, which creates the buckets at 0)
                Grant(("hincrby",), _written("stats", "arrived")),
                Grant(("zadd",), _written("expiring", "arrivals")),
                # A refused enqueue undoes its own arrival count (its first write): back to
                # no count, out of the arrivals set. No more than HINCRBY already allows.
                Grant(("hdel",), _written("arrived")),
                Grant(("zrem",), _written("arrivals")),
                Grant(("hset",), _written("queued")),
                # A scheduled job (enqueue with a delay or run_at) waits as a retry does:
                # its job hash, its due time in the delayed set, its deadline in the expiry
                # set (docs/operations.md, note 1, says what HSET of job hashes allows).
                Grant(("hset",), _written("job:*")),
                Grant(("zadd",), _written("delayed", "expiry")),
                # Reads: duplicate check and job state, results, depths and counters.
                Grant(("hget", "hmget", "hgetall"), _read("job:*")),
                Grant(("hget", "hmget", "hexists", "hlen"), _read("queued")),
                Grant(("hget",), _read("arrived")),
                # One EXISTS spans job hashes and results (a held result takes its id too),
                # and Redis checks all keys of a command against one selector.
                Grant(("exists",), _read("job:*", "result:*")),
                # Results, and whether the type is paused (JobQueue.pause_state).
                Grant(("get",), _read("result:*", "paused")),
                Grant(("type",), _read(*_ENQUEUE_CHECKED)),
                Grant(("llen",), _read("queue", "queue:*", "processing", "dead")),
                Grant(("zcard",), _read("delayed", "waiting")),
                # (TYPE and HMGET: register_type checks the buckets before HINCRBY)
                Grant(("hgetall", "hmget", "type"), _read("stats")),
                Grant(("sadd",), (_TYPES,)),  # the exporter discovers types here
                _STORE_GRANT,
            ),
            # completions.py PSUBSCRIBEs agent:*:completed; progress_events.py SUBSCRIBEs
            # agent:<type>:progress, which the pattern matches.
            channels="every type",
            # A cancelled waiting job's completion event (queue_cancel). A false id published
            # there makes subscribers read that job's result again, no more.
            publishes_completions=True,
            scoped=True,
        ),
        AclRole(
            name="worker",
            summary=(
                "takes jobs (BLMOVE + claim), renews leases, stores and publishes progress "
                "reports, completes, fails and retries them, reaps expired leases, promotes "
                "delayed jobs, cleans up expired jobs, manages dead letters, publishes "
                "completions and uses the JobStore, for its own agent types and agents only"
            ),
            scripts=(*_WORKER_SCRIPTS, *_STORE_SCRIPTS),
            keyless=("time", "scan", "publish", "info"),  # info: the eviction policy check
            grants=(
                # Its scripts, with every key of its types (each command they call is
                # checked against the grants below all the same).
                Grant(_SCRIPTING, _written("*")),
                Grant(_WORKER_READS, _read("*")),
                *_WORKER_WRITES,
                Grant(("sadd",), (_TYPES,)),
                _STORE_GRANT,
            ),
            channels="own types",
            scoped=True,
        ),
        AclRole(
            name="exporter",
            summary=(
                "reads depths, counters, heartbeats and each worker's jobs in progress of "
                "every agent type and discovers the types, with plain read commands on "
                "those keys only; writes nothing, "
                "reads no job, payload or result, runs no script"
            ),
            scripts=(),
            keyless=("time", "info"),  # info: Redis memory and eviction policy metrics
            grants=(
                Grant(("scard", "sscan"), (KeyPattern("types"),)),
                Grant(("llen",), _read("queue", "queue:*", "processing", "dead")),
                Grant(("zcard",), _read("delayed", "waiting")),
                # Each worker's count of jobs in progress, which its heartbeat writes: the
                # per-worker view without reading the job hashes.
                Grant(("hgetall",), _read("stats", "worker_jobs")),
                Grant(("zrange",), _read("workers", "waiting", "arrivals")),
                # How many jobs wait packed: HLEN counts the fields, never reads a value.
                Grant(("hlen",), _read("queued")),
                # Whether the type is paused (queue_paused).
                Grant(("get",), _read("paused")),
                # Its configured rate and cap (queue_rate_limit_per_second, ...).
                Grant(("hmget",), _read("limits")),
                # Fair share: the keys waiting and since when each has had no start,
                # all (HGETALL) or a sample of a large ring (HRANDFIELD): key -> ms, no
                # job id or payload (exporter/fair_share.py).
                Grant(("hlen", "hgetall", "hrandfield"), _read("fair:since")),
                # With --fair-key-top: a key's backlog. LLEN only, never its job ids.
                Grant(("llen",), _read("fair:q:*")),
            ),
            channels="none",
            scoped=False,
        ),
        AclRole(
            name="reader",
            summary=(
                "what a read-only console and the read-only operator commands read (info, "
                "workers, job show, dead and failed list and show, dry runs): depths, counters, "
                "heartbeats, pages of each list, job records with payloads, results; "
                "writes nothing, runs no script"
            ),
            scripts=(),
            keyless=("time", "info"),  # info: the eviction policy check at connect
            grants=_OPERATOR_READS,
            channels="none",
            scoped=True,
        ),
        AclRole(
            name="operator",
            summary=(
                "reads what the reader reads, requeues and purges dead letters and failed "
                "jobs, pauses and resumes agent types, sets their limits and cancels jobs "
                "(the read-write console, dead and failed requeue and purge, pause, resume, "
                "limits set, job and session cancel); cannot enqueue, take, claim, complete "
                "or fail jobs"
            ),
            scripts=_OPERATOR_SCRIPTS,
            keyless=("time", "info"),
            grants=(
                *_OPERATOR_READS,
                # The dead-letter scripts (the kept list: dead letters or failed jobs) and
                # the pause script, with exactly the keys they declare.
                Grant(_SCRIPTING, _written(*_OPERATOR_KEYS)),
                # Their checks before the first write (key types, the enqueued counter,
                # each record's ttl: HGET of the job hash is a read above).
                Grant(("type",), _read(*_OPERATOR_CHECKED)),
                # Fair share: a requeued job with a fairness key goes back on its key's
                # list, and the key into the ring if that list was empty (its LLEN), waiting
                # from now in the ring's since hash.
                Grant(("llen",), _read("fair")),
                Grant(("lpush",), _written("fair", "fair:q:*")),
                Grant(("hset",), _written("fair:since")),
                Grant(("hget",), _read("stats")),
                # Their writes, each command on its one kind of key. No EXISTS: the
                # enqueue script, which calls it, is refused.
                Grant(("lrem",), _written("dead", "failed")),
                Grant(("lpush",), _written("queue", "queue:*")),
                Grant(("zadd",), _written("expiry", "waiting")),
                Grant(("hincrby",), _written("stats")),
                # A requeued record: its state and old numbers deleted, each number added
                # back at its new value. No HSET: it could write a payload, so a job no
                # one enqueued (a hash of numbers alone is failed as corrupt, unrun).
                Grant(("hdel", "hincrby", "persist"), _written("job:*")),
                # One DEL takes a record and its result: one selector for both.
                Grant(("del",), _written("job:*", "result:*")),
                # The pause: its moment written, or the key deleted to resume.
                Grant(("set", "del"), _written("paused")),
                # The limits (queue_limits.lua): fields set or lifted, HGETALL read back,
                # fair share's key weights counted (HKEYS).
                Grant(("hset", "hdel"), _written("limits")),
                Grant(("hkeys",), _read("limits")),
                *_CANCEL_GRANTS,
                Grant(("hincrby",), _written("arrived")),  # a cancelled packed job's count
            ),
            channels="own types",
            publishes_completions=True,  # as the producer's (queue_cancel)
            scoped=True,
        ),
    )
}


def ungranted_script_commands(role: str) -> frozenset[str]:
    """Commands the role's scripts call that none of its grants names (must be empty; that
    each is granted on the right keys is proven by running the role: tests/redis)."""
    spec = ROLES[role]
    return frozenset(_called(spec.scripts) - set(spec.all_commands()))


class RuleOptions(TypedDict, total=False):
    """The keyword arguments of `rules()` (AclRole.rules' defaults: the package's prefixes,
    unscoped)."""

    queue_prefix: str
    store_prefix: str
    agent_types: Iterable[str] | None
    store_agents: Iterable[str] | None


def rules(role: str, **options: Unpack[RuleOptions]) -> list[str]:
    """The ACL rule tokens of `role` (a name in ROLES).

    `agent_types` scopes every role but the exporter to those agent types' queue keys
    (and completion channels), `store_agents` a producer or worker to those JobStore
    agents' records (None: all of them); `queue_prefix` and `store_prefix` are the keys'."""
    return ROLES[role].rules(**options)


def acl_file_line(username: str, password: str, role: str, **options: Unpack[RuleOptions]) -> str:
    """One `users.acl` line (or `--user` argument) for `username` in `role` (options as
    for `rules()`).

    The password is stored as its SHA-256 (`#<hex>`), so the ACL file never holds it."""
    digest = hashlib.sha256(password.encode("utf-8")).hexdigest()
    return " ".join(["user", username, "reset", "on", f"#{digest}", *rules(role, **options)])


def setuser_command(
    username: str, role: str, password: str, **options: Unpack[RuleOptions]
) -> list[str]:
    """`ACL SETUSER` arguments that make `username` exactly a `role` user (options as for
    `rules()`)."""
    return ["ACL", "SETUSER", username, "reset", "on", f">{password}", *rules(role, **options)]


def markdown(*, queue_prefix: str = QUEUE_PREFIX, store_prefix: str = STORE_PREFIX) -> str:
    """The (unscoped) rules of every role as docs/operations.md shows them."""
    prefixes: RuleOptions = {"queue_prefix": queue_prefix, "store_prefix": store_prefix}
    parts = []
    for role in ROLES.values():
        command = " ".join(setuser_command(role.name, role.name, "<password>", **prefixes))
        parts.append(f"**{role.name}**: {role.summary}.\n\n```\n{command}\n```\n")
    return "\n".join(parts)


if __name__ == "__main__":
    # The former alias of the `acl` command: the CLI imports this module, so it does not
    # import the CLI back; a script still calling it is told where the command went.
    sys.exit("error: run `agentjobs acl` (or `python -m platform_common.jobs acl`)")
