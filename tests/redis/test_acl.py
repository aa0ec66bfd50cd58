"""ACL roles: the rules load into a real redis-server, the docs show them as they are,
and each role is refused what it must not do (run under a real ACL user)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio as aioredis
from redis.exceptions import NoPermissionError, ResponseError

from platform_common.jobs import JobStatus, acl, make_job_store
from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import Completion, JobPayload, JobQueue
from platform_common.jobs_exporter.service import Exporter
from platform_common.jobs_exporter.settings import ExporterSettings
from tests.support.paths import REPO_ROOT
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import eventually, fast_settings, running_worker
from tests.support.redis_server import RedisServer

ADMIN_PASSWORD = "admin-pw-for-acl-tests"
ROLE_PASSWORD = {role: f"{role}-pw-7d1c" for role in acl.ROLES}
DOCS = REPO_ROOT / "docs" / "operations.md"


@pytest.fixture(scope="module")
def acl_server() -> Iterator[RedisServer]:
    users = [f"admin on >{ADMIN_PASSWORD} ~* &* +@all", "default off"]
    # RedisServer passes each entry as `--user <tokens>`: the file line minus "user ".
    users += [
        acl.acl_file_line(role, ROLE_PASSWORD[role], role).removeprefix("user ")
        for role in acl.ROLES
    ]
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
    await client.flushall()
    try:
        yield client
    finally:
        await client.aclose()


async def role_client(server: RedisServer, role: str) -> aioredis.Redis:
    return aioredis.Redis.from_url(server.url_for(role, ROLE_PASSWORD[role]), decode_responses=True)


def test_docs_show_the_rules_of_every_role() -> None:
    text = DOCS.read_text(encoding="utf-8")
    block = re.search(r"<!-- acl-rules:start -->\n(.*)<!-- acl-rules:end -->", text, re.S)
    assert block is not None, "docs/operations.md lost its acl-rules markers"
    assert block.group(1) == acl.markdown(), (
        "docs/operations.md is stale: paste `python -m platform_common.jobs.acl` "
        "between the acl-rules markers"
    )


def test_every_script_command_is_known_to_redis() -> None:
    # A typo in a rule would make redis-server refuse the whole user at start; this
    # catches a parsing slip in script_commands before that.
    for role in acl.ROLES.values():
        for command in role.all_commands():
            assert re.fullmatch(r"[a-z_]+(\|[a-z_-]+)?", command), command


async def test_rules_load_and_match_what_redis_reports(
    acl_server: RedisServer, admin: aioredis.Redis
) -> None:
    for role in acl.ROLES:
        command = acl.setuser_command(f"{role}-2", role, ROLE_PASSWORD[role])
        reply = await admin.execute_command(*command)  # type: ignore[no-untyped-call]
        assert reply in ("OK", True, b"OK")
        info = await admin.acl_getuser(f"{role}-2")
        assert "on" in info["flags"]
        assert info["categories"] == ["-@all"]
        assert set(info["commands"]) == {f"+{c}" for c in acl.ROLES[role].all_commands()}
        rules = acl.rules(role)
        assert set(info["keys"]) == {rule for rule in rules if "~" in rule}
        assert set(info["channels"]) == {rule for rule in rules if rule.startswith("&")}


async def test_exporter_is_read_only(acl_server: RedisServer, admin: aioredis.Redis) -> None:
    keys = QueueKeys("dining")
    await admin.lpush(keys.queue, "j1")
    exporter = await role_client(acl_server, "exporter")
    try:
        assert await exporter.ping()
        assert await exporter.eval_ro("return redis.call('LLEN', KEYS[1])", 1, keys.queue) == 1
        with pytest.raises(NoPermissionError):
            await exporter.lpush(keys.queue, "j2")
        with pytest.raises(NoPermissionError):
            await exporter.delete(keys.queue)
        with pytest.raises(NoPermissionError):
            await exporter.eval("return 1", 0)
        with pytest.raises(ResponseError):  # a write inside a read-only script
            await exporter.eval_ro("return redis.call('DEL', KEYS[1])", 1, keys.queue)
        with pytest.raises(NoPermissionError):
            await exporter.get("agentjobs:{svc}:j1")  # outside the queue prefix
        with pytest.raises(NoPermissionError):
            await exporter.flushall()
    finally:
        await exporter.aclose()
    assert await admin.llen(keys.queue) == 1


async def test_producer_cannot_take_or_complete_jobs(
    acl_server: RedisServer, admin: aioredis.Redis
) -> None:
    keys = QueueKeys("dining")
    await admin.lpush(keys.queue, "j1")
    await admin.set(keys.result("j1"), "{}")
    producer = await role_client(acl_server, "producer")
    try:
        assert await producer.get(keys.result("j1")) == "{}"
        with pytest.raises(NoPermissionError):
            await producer.blmove(
                keys.queue, keys.processing, 1, "RIGHT", "LEFT"
            )  # refused at once
        with pytest.raises(NoPermissionError):
            await producer.zadd(keys.leases, {"j1": 1})
        with pytest.raises(NoPermissionError):
            await producer.set(keys.result("j1"), "forged")
        with pytest.raises(NoPermissionError):
            await producer.publish(keys.channel, "j1")
        with pytest.raises(NoPermissionError):
            await producer.keys("*")
    finally:
        await producer.aclose()
    assert await admin.llen(keys.processing) == 0
    assert await admin.get(keys.result("j1")) == "{}"


async def test_worker_cannot_administer_redis(
    acl_server: RedisServer, admin: aioredis.Redis
) -> None:
    worker = await role_client(acl_server, "worker")
    try:
        for forbidden in (
            worker.flushall(),
            worker.config_get("*"),
            worker.execute_command("ACL", "LIST"),  # type: ignore[no-untyped-call]
            worker.set("unrelated:key", "1"),
            worker.keys("*"),
        ):
            with pytest.raises(NoPermissionError):
                await forbidden
    finally:
        await worker.aclose()
    assert await admin.dbsize() == 0


# -- each role doing its whole job under its own user ---------------------------------
def role_url(server: RedisServer, role: str) -> str:
    return server.url_for(role, ROLE_PASSWORD[role])


async def echo(job: JobPayload) -> dict[str, str]:
    return {"echo": job.job_id}


async def fail(job: JobPayload) -> None:
    raise RuntimeError("always")


async def test_each_role_does_its_whole_job_under_its_own_user(
    acl_server: RedisServer, admin: aioredis.Redis
) -> None:
    producer_settings = fast_settings(role_url(acl_server, "producer"), max_attempts=1)
    worker_settings = fast_settings(role_url(acl_server, "worker"), max_attempts=1)
    jobs = [make_job(task=f"acl {i}") for i in range(3)]
    async with await JobQueue.connect(producer_settings) as producer:
        completions = producer.completions(watch=[("dining", j["job_id"]) for j in jobs])
        try:
            await completions.resync()  # PSUBSCRIBE as the producer
            await producer.enqueue(jobs[0])
            await producer.enqueue_many(jobs[1:])
            assert (await producer.stats("dining")).queued == 3
            async with running_worker(worker_settings, echo):  # the worker user
                done = {c.job_id async for c in _take(completions, 3)}
            assert done == {j["job_id"] for j in jobs}
            result = await producer.get_result(jobs[0]["job_id"])
            assert result is not None and result.ok
            record = await producer.get_record("dining", jobs[0]["job_id"])
            assert record is not None and record.status is JobStatus.SUCCEEDED
        finally:
            await completions.aclose()

    # The worker user also runs the operator's chores: dead letters and cleanup.
    poison = make_job(task="poison")
    async with await JobQueue.connect(worker_settings) as operator:
        await operator.enqueue(poison)
        async with running_worker(worker_settings, fail):
            await eventually(lambda: operator.dead_letters.count("dining"))
        [letter] = await operator.dead_letters.list("dining")
        assert letter.job_id == poison["job_id"]
        assert await operator.dead_letters.requeue("dining", [poison["job_id"]])
        assert await operator.cleanup("dining") == []
        async with running_worker(worker_settings, fail):
            await eventually(lambda: operator.dead_letters.count("dining"))
        assert await operator.dead_letters.purge("dining") == 1

    # The JobStore under both application roles.
    for role in ("producer", "worker"):
        store = make_job_store(role_url(acl_server, role), agent=f"{role}-agent")
        store.time_index = True
        try:
            await store.create("j1", {"n": 1}, ttl_seconds=60, owner_oid="owner-1")
            await store.update("j1", status=JobStatus.RUNNING)
            assert await store.exists("j1") and await store.list_ids() == ["j1"]
            page = await store.list_for_owner("owner-1", limit=5)
            assert [row.job_id for row in page.rows] == ["j1"]
            assert await store.delete("j1")
        finally:
            await store.close()

    # The read-only exporter sees it all.
    exporter = Exporter(
        ExporterSettings.from_args(["--redis-url", role_url(acl_server, "exporter")])
    )
    try:
        assert await exporter.ready()
        scrape = await exporter.scrape()
    finally:
        await exporter.aclose()
    assert scrape.snapshot is not None
    [dining] = [t for t in scrape.snapshot.types if t.agent_type == "dining"]
    assert dining.counters["completed"] == 3
    assert dining.counters["dead_lettered"] == 2


async def _take(iterator: AsyncIterator[Completion], count: int) -> AsyncIterator[Completion]:
    taken = 0
    async for item in iterator:
        yield item
        taken += 1
        if taken == count:
            return
