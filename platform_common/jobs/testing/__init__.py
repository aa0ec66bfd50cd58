"""Helpers that start real servers (redis-server) for tests and demos on free ports."""

from .redis_server import RedisServer, find_free_port

__all__ = ["RedisServer", "find_free_port"]
