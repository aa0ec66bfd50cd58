"""Helpers that start real servers (redis-server, a cluster, sentinels) for tests and
demos on free ports."""

from .redis_cluster import RedisClusterNodes
from .redis_sentinel import RedisSentinelGroup
from .redis_server import RedisServer, find_free_port

__all__ = ["RedisClusterNodes", "RedisSentinelGroup", "RedisServer", "find_free_port"]
