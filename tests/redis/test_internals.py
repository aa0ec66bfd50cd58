"""redis-py's private API is used in one module (platform_common/jobs/redis/internals.py),
and every hook it uses exists on the installed redis-py: an upgrade that removes one
fails here, naming it, instead of somewhere in a failover."""

from __future__ import annotations

import ast
import inspect

import pytest
import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, NodesManager, RedisCluster
from redis.asyncio.connection import AbstractConnection

from platform_common.jobs.redis.internals import HOOKS
from tests.support.paths import REPO_ROOT

PACKAGE_FOLDERS = ("platform_common", "exporter", "monitoring", "dashboards", "alerts", "runbooks")
INTERNALS = REPO_ROOT / "platform_common/jobs/redis/internals.py"
# Unused ports: nothing below connects, the objects are only built.
HOST, PORT = "127.0.0.1", 1


@pytest.mark.parametrize(("owner", "name"), HOOKS, ids=[f"{c.__name__}.{n}" for c, n in HOOKS])
async def test_the_installed_redis_py_has_the_hook(owner: type, name: str) -> None:
    cluster = RedisCluster(host=HOST, port=PORT)
    try:
        instances: dict[type, object] = {
            ClusterNode: ClusterNode(HOST, PORT),
            NodesManager: cluster.nodes_manager,
            RedisCluster: cluster,
            AbstractConnection: aioredis.Connection(host=HOST, port=PORT),
        }
        instance = instances[owner]
        assert isinstance(instance, owner)
        assert hasattr(instance, name), (
            f"redis-py {redis.__version__} has no {owner.__name__}.{name}: "
            "platform_common/jobs/redis/internals.py must change with it"
        )
        method = getattr(owner, name, None)
        if inspect.isfunction(method):  # a method the package overrides and awaits
            assert inspect.iscoroutinefunction(method), f"{owner.__name__}.{name}"
    finally:
        await cluster.aclose()


def test_no_other_module_uses_the_hooks() -> None:
    hooks = {name for _, name in HOOKS}
    users = set()
    for folder in PACKAGE_FOLDERS:
        for path in (REPO_ROOT / folder).rglob("*.py"):
            if path == INTERNALS:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                used = node.attr if isinstance(node, ast.Attribute) else None
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    used = node.name  # an override
                if used in hooks:
                    users.add(f"{path.relative_to(REPO_ROOT)}: {used}")
    assert sorted(users) == []
