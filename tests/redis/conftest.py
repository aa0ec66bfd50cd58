"""The ACL tests' fixtures: `acl_server`, one redis-server per test module holding the
module's role users (its `role_users()`: ACL file lines without the leading "user ")
beside `admin` (every right; ADMIN_PASSWORD) with the default user off; and `admin`, a
client of it as that user, on an empty keyspace."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio as aioredis

from tests.support.redis_server import RedisServer

ADMIN_PASSWORD = "admin-pw-acl-tests-7f1d"


@pytest.fixture(scope="module")
def acl_server(request: pytest.FixtureRequest) -> Iterator[RedisServer]:
    users = [f"admin on >{ADMIN_PASSWORD} ~* &* +@all", "default off"]
    users += request.module.role_users()
    server = RedisServer(acl_users=users).start()
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture
async def admin(acl_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(
        acl_server.url_for("admin", ADMIN_PASSWORD), decode_responses=True
    )
    try:
        await client.flushall()
        yield client
    finally:
        await client.aclose()
