"""The package's Lua scripts and the one way they run: by digest, and on NOSCRIPT (after
SCRIPT FLUSH, a restart or a failover) once more by source, alone or in a pipeline.

A `Script` is bound to no client: its digest is the SHA1 of its source, computed here,
so nothing is loaded ahead of time and the same object serves every client, node and
event loop. NOSCRIPT means the call did not run, so re-running it is always safe; the
re-run sends EVAL with the source, which also caches the script on that node (on a
cluster, the node that owns the call's keys). Every call names its keys through KEYS,
so cluster clients route it by slot, pipelines included.

A script shares helpers through includes: a line `-- @include <name>` stands for
`lua/include/<name>.lua`, put in its place when the source is read (`assemble`), so each
helper is written once and a script's source (and digest) holds only the helpers it
names. An unknown include is refused when the script is first named (the queue's at
import).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Union

from redis.client import NEVER_DECODE
from redis.exceptions import NoScriptError, ResponseError

from .url import RedisClient

__all__ = [
    "Command",
    "Replies",
    "Script",
    "ScriptCall",
    "Send",
    "UnknownLuaInclude",
    "assemble",
    "command_transport",
    "lua_source",
    "pipeline_transport",
    "run_batch",
    "run_command",
    "run_pipelined",
]


@cache
def lua_source(name: str) -> str:
    """The text of `lua/<name>.lua` with its includes in place, read from the installed
    package once."""
    return assemble(name, _package_text)


def _package_text(path: str) -> str:
    return resources.files("platform_common.jobs").joinpath("lua", f"{path}.lua").read_text("utf-8")


class UnknownLuaInclude(LookupError):
    """A script names an include that is not in lua/include/, or that is malformed."""


_INCLUDE = re.compile(r"^--[ \t]*@include\b[ \t]*(.*?)[ \t]*$", re.MULTILINE)
_INCLUDE_NAME = re.compile(r"[a-z][a-z0-9_]*")


def assemble(name: str, read: Callable[[str], str]) -> str:
    """The source of script `name`, each `-- @include <x>` line replaced by the assembled
    text of `include/<x>`, each include once (the first line naming it; a later one, in
    the script or in another include, is left empty). `read(path)` is the text of
    `lua/<path>.lua` (FileNotFoundError if there is none): the installed package's, or
    another release's (bench/lua_cpu.py)."""
    placed: set[str] = set()

    def expand(path: str, chain: tuple[str, ...]) -> str:
        def include(match: re.Match[str]) -> str:
            wanted = match[1]
            where = f"lua/{path}.lua"
            if not _INCLUDE_NAME.fullmatch(wanted):
                raise UnknownLuaInclude(f"{where}: malformed include line {match[0]!r}")
            if wanted in chain:
                raise UnknownLuaInclude(f"{where}: include {wanted!r} includes itself")
            if wanted in placed:
                return ""
            placed.add(wanted)
            try:
                return expand(f"include/{wanted}", (*chain, wanted)).rstrip("\n")
            except FileNotFoundError:
                raise UnknownLuaInclude(
                    f"{where}: unknown include {wanted!r} (no lua/include/{wanted}.lua)"
                ) from None

        return _INCLUDE.sub(include, read(path))

    return expand(name, ())


@dataclass(frozen=True, slots=True)
class Script:
    """One `lua/<name>.lua` file: its source and digest."""

    name: str
    source: str
    sha: str

    @classmethod
    def named(cls, name: str) -> Script:
        return _script(name)

    def call(
        self,
        keys: Sequence[str | bytes],
        args: Sequence[Any],
        *,
        readonly: bool = False,
        send_source: bool = False,
    ) -> ScriptCall:
        """One invocation, to run alone or inside a pipeline."""
        return ScriptCall(self, keys, args, readonly, send_source)


@cache
def _script(name: str) -> Script:
    source = lua_source(name)
    return Script(name, source, hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest())


@dataclass(slots=True)  # not frozen: one is built per call, and a frozen init costs 2x
class ScriptCall:
    """A script with its KEYS and ARGV. `readonly` uses EVALSHA_RO/EVAL_RO, which a
    read-only ACL user (the exporter's) may run and a replica may serve. `send_source`
    sends EVAL at once, for a caller that knows the server lacks the script (it saves
    the NOSCRIPT round trip)."""

    script: Script
    keys: Sequence[str | bytes]
    """Key names; bytes for a key that is not UTF-8 (a job id read from Redis as such)."""
    args: Sequence[Any]
    readonly: bool = False
    send_source: bool = False

    def by_digest(self) -> tuple[Any, ...]:
        verb = "EVALSHA_RO" if self.readonly else "EVALSHA"
        return (verb, self.script.sha, len(self.keys), *self.keys, *self.args)

    def by_source(self) -> tuple[Any, ...]:
        verb = "EVAL_RO" if self.readonly else "EVAL"
        return (verb, self.script.source, len(self.keys), *self.keys, *self.args)

    def first_command(self) -> tuple[Any, ...]:
        return self.by_source() if self.send_source else self.by_digest()


Command = Union[Sequence[Any], ScriptCall]  # noqa: UP007 (a runtime alias)
"""A plain command (`("HGET", key, field)`) or a script call."""


class Replies(list[Any]):
    """A pipeline's replies in order, and how many round trips they took."""

    round_trips: int = 1


Send = Callable[[list[tuple[Any, ...]]], Awaitable[list[Any]]]
"""A transport: runs commands back to back, each reply or error (not raised) in place."""


async def run_batch(send: Send, commands: Sequence[Command]) -> Replies:
    """Run `commands` through `send`; each reply, or the error it raised, in its place.
    Script calls answered NOSCRIPT run again by source, in one more round trip: the one
    NOSCRIPT path of the package, whatever the transport."""
    if not commands:
        return Replies()
    replies = Replies(
        await send([c.first_command() if isinstance(c, ScriptCall) else tuple(c) for c in commands])
    )
    unloaded = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
    if unloaded:
        rerun = await send([_script_call(commands[i]).by_source() for i in unloaded])
        for index, reply in zip(unloaded, rerun, strict=True):
            replies[index] = reply
        replies.round_trips = 2
    return replies


def _script_call(command: Command) -> ScriptCall:
    assert isinstance(command, ScriptCall)  # only a script call can answer NOSCRIPT
    return command


async def run_command(client: RedisClient, command: Command) -> Any:
    """Run one command through `client`'s pool; its error raised."""
    reply = (await run_batch(command_transport(client), [command]))[0]
    if isinstance(reply, Exception):
        raise reply
    return reply


def command_transport(client: RedisClient) -> Send:
    """Send each command as one `execute_command` of `client` (its pool and retries)."""

    async def send(commands: list[tuple[Any, ...]]) -> list[Any]:
        replies: list[Any] = []
        for command in commands:
            try:
                replies.append(await client.execute_command(*command))
            except ResponseError as exc:  # an error reply, in place like a pipeline's
                replies.append(exc)
        return replies

    return send


def pipeline_transport(
    client: RedisClient, undecoded: Callable[[tuple[Any, ...]], bool] | None = None
) -> Send:
    """Send through a redis-py pipeline of `client` (one round trip per node); the
    replies of the commands `undecoded` names are read as bytes."""

    async def send(commands: list[tuple[Any, ...]]) -> list[Any]:
        pipe = client.pipeline(transaction=False)
        for command in commands:
            # execute_command, not pipe.evalsha(): redis-py's cluster pipeline refuses
            # the script methods by name but routes a raw EVALSHA by its keys.
            if undecoded is not None and undecoded(command):
                pipe.execute_command(*command, **{NEVER_DECODE: True})
            else:
                pipe.execute_command(*command)
        return list(await pipe.execute(raise_on_error=False))

    return send


async def run_pipelined(client: RedisClient, commands: Sequence[Command]) -> Replies:
    """Run `commands` in one pipeline of `client`; each reply or error in place."""
    return await run_batch(pipeline_transport(client), commands)
