"""The scripts' shared helpers: each written once, in lua/include/, and put in place of a
script's `-- @include <name>` lines when its source is read (redis/script.py, `assemble`),
so the digest, the EVAL'd source and the ACL rules derived from it all see the helpers."""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Callable

import pytest

from platform_common.jobs import acl
from platform_common.jobs.redis.script import Script, UnknownLuaInclude, assemble, lua_source
from tests.support.paths import REPO_ROOT

LUA = REPO_ROOT / "platform_common" / "jobs" / "lua"
SCRIPTS = sorted(path.stem for path in LUA.glob("*.lua"))
INCLUDES = sorted(path.stem for path in (LUA / "include").glob("*.lua"))
_FUNCTION = re.compile(r"^\s*local function ([A-Za-z_]\w*)", re.MULTILINE)


def reader(files: dict[str, str]) -> Callable[[str], str]:
    """`assemble`'s reader over `files` (path under lua/ -> text)."""

    def read(path: str) -> str:
        if path not in files:
            raise FileNotFoundError(path)
        return files[path]

    return read


def test_an_include_line_is_replaced_by_the_include_once() -> None:
    files = {
        "s": "-- @include b\n-- @include a\n-- @include b\nreturn b() + a()\n",
        "include/a": "local function a() return 1 end\n",
        "include/b": "-- @include a\nlocal function b() return a() end\n",
    }
    assert assemble("s", reader(files)) == (
        "local function a() return 1 end\n"
        "local function b() return a() end\n"
        "\n"  # a is in place already (through b)
        "\n"  # b's second line
        "return b() + a()\n"
    )


@pytest.mark.parametrize(
    ("script", "problem"),
    [
        ("-- @include nowhere\nreturn 1\n", "unknown include 'nowhere'"),
        ("-- @include\nreturn 1\n", "malformed include line"),
        ("-- @include Time\nreturn 1\n", "malformed include line"),
        ("-- @include time.lua\nreturn 1\n", "malformed include line"),
        ("-- @include loop\nreturn 1\n", "include 'loop' includes itself"),
    ],
)
def test_a_script_naming_an_unknown_or_malformed_include_is_refused(
    script: str, problem: str
) -> None:
    files = {"s": script, "include/loop": "-- @include loop\n"}
    with pytest.raises(UnknownLuaInclude, match=re.escape(problem)) as raised:
        assemble("s", reader(files))
    assert str(raised.value).startswith("lua/")


def test_a_line_that_only_mentions_an_include_is_left_alone() -> None:
    files = {"s": "-- see @include below\n--@included is no include\nreturn 1\n"}
    assert assemble("s", reader(files)) == files["s"]


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_script_assembles_and_its_digest_is_of_what_redis_runs(name: str) -> None:
    source = lua_source(name)
    assert "@include" not in source
    script = Script.named(name)
    assert script.source == source
    assert script.sha == hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest()


def test_each_helper_is_defined_once_across_the_scripts_and_their_includes() -> None:
    """No script keeps a copy of a helper (or a helper of its own under a shared name),
    and no assembled script defines a function twice."""
    defined: Counter[str] = Counter()
    for path in [*LUA.glob("*.lua"), *(LUA / "include").glob("*.lua")]:
        defined.update(_FUNCTION.findall(path.read_text("utf-8")))
    assert [name for name, times in defined.items() if times > 1] == []
    for name in SCRIPTS:
        functions = Counter(_FUNCTION.findall(lua_source(name)))
        assert [f for f, times in functions.items() if times > 1] == [], name


def test_every_include_is_used_and_redis_time_is_read_only_by_them() -> None:
    named = set()
    for path in [*LUA.glob("*.lua"), *(LUA / "include").glob("*.lua")]:
        named |= set(re.findall(r"^-- @include (\w+)$", path.read_text("utf-8"), re.MULTILINE))
    assert named == set(INCLUDES)
    for name in SCRIPTS:
        assert "redis.call('TIME')" not in (LUA / f"{name}.lua").read_text("utf-8"), name


def test_the_acl_rules_see_the_commands_an_include_calls() -> None:
    """queue_renew's own text calls no TIME (its include does): the worker's rules still
    grant what the assembled script runs."""
    assert "TIME" not in (LUA / "queue_renew.lua").read_text("utf-8")
    assert "time" in acl.script_commands("queue_renew")
    assert "type" in acl.script_commands("queue_kept_prune")
    assert all(acl.ungranted_script_commands(role) == frozenset() for role in acl.ROLES)
