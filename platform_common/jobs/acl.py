"""Least-privilege Redis ACL rules for the package's three roles: producer, worker, exporter.

Each role names the Lua scripts it runs and the commands it sends directly; the
commands the scripts call are read from the `.lua` files themselves (Redis checks a
script's `redis.call` against the caller's ACL too), so a script that starts using a
new command cannot silently break a role. Keys are limited to the package's prefixes
(per key kind where a role needs only some), pub/sub to the completion channels.
docs/operations.md shows the rendered rules; a test keeps the two in step and runs
every role under a real ACL user with exactly these rights.

    ACL SETUSER producer reset on >secret <rules("producer")...>
"""

from __future__ import annotations

import hashlib
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache

from .keys import COMPLETION_PATTERN, QUEUE_PREFIX, STORE_PREFIX
from .redis.script import lua_source

__all__ = [
    "CONNECT_COMMANDS",
    "ROLES",
    "AclRole",
    "acl_file_line",
    "markdown",
    "rules",
    "script_commands",
    "setuser_command",
]

# What any redis-py client may send just to connect and find its way: PING for health
# checks, CLIENT SETNAME, and the topology commands a RedisCluster client needs
# (COMMAND for key positions, CLUSTER SLOTS/SHARDS for the slot map, ASKING during
# resharding). redis-py also sends CLIENT SETINFO, which Redis 7.0 does not know (and
# an ACL naming it would not load); redis-py ignores the error either way.
CONNECT_COMMANDS = (
    "ping",
    "client|setname",
    "command",
    "cluster|slots",
    "cluster|shards",
    "cluster|nodes",
    "asking",
    "readonly",
)

_CALL = re.compile(r"redis\.p?call\(\s*['\"]([A-Za-z_]+)['\"]")


@cache
def script_commands(script: str) -> frozenset[str]:
    """Lower-case names of the commands `lua/<script>.lua` calls."""
    return frozenset(name.lower() for name in _CALL.findall(lua_source(script)))


@dataclass(frozen=True, slots=True)
class AclRole:
    """What one kind of process may do. Key patterns use `{queue}` / `{store}` for the
    configured prefixes; `%R~` is read-only, `~` read-write (Redis 7 key permissions)."""

    name: str
    summary: str
    scripts: tuple[str, ...]
    """Lua scripts the role runs (EVALSHA then EVAL; EVALSHA_RO/EVAL_RO for the exporter)."""
    commands: tuple[str, ...]
    """Commands it sends directly, besides CONNECT_COMMANDS (`a|b` is a subcommand)."""
    keys: tuple[str, ...]
    channels: tuple[str, ...]

    def all_commands(self) -> tuple[str, ...]:
        names = set(CONNECT_COMMANDS) | set(self.commands)
        for script in self.scripts:
            names |= script_commands(script)
        return tuple(sorted(names))

    def rules(
        self, *, queue_prefix: str = QUEUE_PREFIX, store_prefix: str = STORE_PREFIX
    ) -> list[str]:
        """ACL rule tokens (after `ACL SETUSER <name> reset on >password`)."""
        prefixes = {"queue": queue_prefix, "store": store_prefix}
        return [
            "-@all",
            *(f"+{command}" for command in self.all_commands()),
            *(_fill(pattern, prefixes) for pattern in self.keys),
            *(f"&{channel}" for channel in self.channels),
        ]


def _fill(pattern: str, prefixes: Mapping[str, str]) -> str:
    # Only {queue}/{store} are placeholders: the literal hash-tag braces of the key
    # layout ("{*}") stay as they are.
    return pattern.replace("{queue}", prefixes["queue"]).replace("{store}", prefixes["store"])


_STORE_SCRIPTS = ("store_create", "store_update", "store_delete")
# Direct JobStore reads: get/exists (HGETALL, EXISTS), list_ids (SCAN), the time
# index pages (ZRANGE family).
_STORE_READS = ("hgetall", "exists", "scan", "zrange", "zrevrangebyscore", "zrangebyscore")
# EVALSHA, and EVAL for the one re-run after NOSCRIPT (flush, restart, failover). EVAL
# grants nothing SCRIPT LOAD + EVALSHA would not: a script's own commands are checked
# against this same user's ACL.
_SCRIPTING = ("evalsha", "eval")

ROLES: dict[str, AclRole] = {
    role.name: role
    for role in (
        AclRole(
            name="producer",
            summary=(
                "enqueues jobs, reads results, state and depths, follows completion "
                "events and uses the JobStore; cannot take, lease, complete or fail jobs"
            ),
            scripts=("queue_enqueue", *_STORE_SCRIPTS),
            commands=(
                *_SCRIPTING,
                *_STORE_READS,
                "sadd",  # jobs:types, written beside the enqueue script
                "get",  # results
                "hget",
                "hmget",  # job state, re-read after (re)subscribing
                "llen",
                "zcard",  # JobQueue.stats(): depths, read-only
                "psubscribe",
                "punsubscribe",
                "subscribe",
                "unsubscribe",
            ),
            keys=(
                "%R~{queue}:*",  # sees every queue key (stats, state), writes only these:
                "~{queue}:types",
                "~{queue}:{*}:queue",
                "~{queue}:{*}:stats",
                "~{queue}:{*}:expiry",
                "~{queue}:{*}:job:*",
                "~{store}:*",
            ),
            channels=(COMPLETION_PATTERN,),
        ),
        AclRole(
            name="worker",
            summary=(
                "takes jobs (BLMOVE + claim), renews leases, completes, fails and retries "
                "them, reaps expired leases, promotes delayed jobs, cleans up expired "
                "jobs, manages dead letters, publishes completions and uses the JobStore"
            ),
            scripts=(
                "queue_claim",
                "queue_complete",
                "queue_fail",
                "queue_renew",
                "queue_heartbeat",
                "queue_promote",
                "queue_reap_scan",
                "queue_expire",
                "queue_dead_requeue",
                "queue_dead_purge",
                *_STORE_SCRIPTS,
            ),
            commands=(
                *_SCRIPTING,
                *_STORE_READS,
                "sadd",  # jobs:types: a worker registers its type for the exporter
                "blmove",
                "lmove",
                "lrange",
                "llen",
                "zrangebyscore",
                "hgetall",
                "hmget",
                "get",
            ),
            keys=("~{queue}:{*}:*", "~{queue}:types", "~{store}:*"),
            channels=(COMPLETION_PATTERN,),
        ),
        AclRole(
            name="exporter",
            summary=(
                "reads the per-type snapshot (read-only script) and discovers agent "
                "types; writes nothing"
            ),
            scripts=("exporter_snapshot",),
            commands=("evalsha_ro", "eval_ro", "scard", "sscan"),
            keys=("%R~{queue}:*",),
            channels=(),
        ),
    )
}


def rules(
    role: str, *, queue_prefix: str = QUEUE_PREFIX, store_prefix: str = STORE_PREFIX
) -> list[str]:
    """The ACL rule tokens of `role` ('producer', 'worker' or 'exporter')."""
    return ROLES[role].rules(queue_prefix=queue_prefix, store_prefix=store_prefix)


def acl_file_line(username: str, password: str, role: str, **prefixes: str) -> str:
    """One `users.acl` line (or `--user` argument) for `username` in `role`.

    The password is stored as its SHA-256 (`#<hex>`), so the ACL file never holds it."""
    digest = hashlib.sha256(password.encode("utf-8")).hexdigest()
    return " ".join(["user", username, "reset", "on", f"#{digest}", *rules(role, **prefixes)])


def setuser_command(username: str, role: str, password: str, **prefixes: str) -> list[str]:
    """`ACL SETUSER` arguments that make `username` exactly a `role` user."""
    return ["ACL", "SETUSER", username, "reset", "on", f">{password}", *rules(role, **prefixes)]


def markdown(**prefixes: str) -> str:
    """The rules of every role as docs/operations.md shows them."""
    parts = []
    for role in ROLES.values():
        command = " ".join(setuser_command(role.name, role.name, "<password>", **prefixes))
        parts.append(f"**{role.name}**: {role.summary}.\n\n```\n{command}\n```\n")
    return "\n".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    """Alias of the `acl` command (`python -m platform_common.jobs acl`); its exit status."""
    from .cli import main as cli_main  # here: the CLI's acl command imports this module

    args = sys.argv[1:] if argv is None else argv
    return cli_main(["acl", *args], prog="python -m platform_common.jobs")


if __name__ == "__main__":
    sys.exit(main())
