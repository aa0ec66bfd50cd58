"""`agentjobs acl` scoping: the printed rules, loaded into a real redis-server, let a worker
work on its own agent types and JobStore agents and nothing else."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import NoPermissionError

from platform_common.jobs import acl
from platform_common.jobs.keys import QueueKeys, StoreKeys
from platform_common.jobs.queue import JobPayload, JobQueue
from tests.cli.runner import one_error_line, run
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import eventually, fast_settings, running_worker
from tests.support.redis_server import RedisServer

ADMIN_PASSWORD = "admin-pw-acl-cli-5e2a"
WORKER_PASSWORD = "worker-pw-acl-cli-c81f"
OWN, OTHER = QueueKeys("dining"), QueueKeys("flights")
OWN_STORE, OTHER_STORE = StoreKeys("dining-agent"), StoreKeys("billing")


def test_scoped_rules_are_the_libraries() -> None:
    done = run(
        "acl", "--role", "worker", "--agent-types", "dining, flights,", "--store-agents",
        "dining-agent",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    expected = acl.rules("worker", agent_types=["dining", "flights"], store_agents=["dining-agent"])
    assert done.stdout == " ".join(expected) + "\n"
    assert "~jobs:{dining}:*" in done.stdout and "~jobs:{*}" not in done.stdout
    assert "&agent:flights:completed" in done.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--role", "worker", "--agent-types", "din*"], "error: --agent-types: 'din*' must be"),
        (["--role", "worker", "--agent-types", "Dining"], "error: --agent-types: 'Dining' must be"),
        (["--role", "worker", "--store-agents", "a b"], "error: --store-agents: 'a b' must be"),
        (["--role", "worker", "--agent-types", " , "], "error: --agent-types: give at least one"),
        (["--role", "exporter", "--agent-types", "dining"], "error: the exporter role reads"),
        (["--agent-types", "dining"], "error: --agent-types needs --role"),
        (["--user", "w1"], "error: --user needs --role"),
        # A glob would match every prefix's keys; a space would split a rule in two.
        (["--queue-prefix", "*"], "error: --queue-prefix: '*' must be"),
        (["--role", "worker", "--queue-prefix", "a b"], "error: --queue-prefix: 'a b' must be"),
        (["--role", "producer", "--store-prefix", "agent*"], "error: --store-prefix: 'agent*'"),
    ],
)
def test_bad_scopes_are_refused_in_one_line(args: list[str], message: str) -> None:
    done = run("acl", *args, stdin="pw\n")
    assert done.returncode == 2
    assert one_error_line(done).startswith(message), done.stderr
    assert done.stdout == ""


def test_user_line_holds_the_password_hash_read_from_stdin() -> None:
    done = run("acl", "--role", "exporter", "--user", "exp1", stdin=f"{WORKER_PASSWORD}\n")
    assert done.returncode == 0, done.stderr
    digest = hashlib.sha256(WORKER_PASSWORD.encode()).hexdigest()
    assert done.stdout == acl.acl_file_line("exp1", WORKER_PASSWORD, "exporter") + "\n"
    assert f"#{digest}" in done.stdout and WORKER_PASSWORD not in done.stdout
    empty = run("acl", "--role", "exporter", "--user", "exp1", stdin="")
    assert empty.returncode == 2
    assert "stdin gave none" in one_error_line(empty)


@pytest.fixture(scope="module")
def scoped_server() -> Iterator[RedisServer]:
    """A server whose `w1` is exactly what the CLI printed for a dining worker."""
    printed = run(
        "acl", "--role", "worker", "--agent-types", "dining", "--store-agents", "dining-agent",
        "--user", "w1", stdin=f"{WORKER_PASSWORD}\n",
    )  # fmt: skip
    assert printed.returncode == 0, printed.stderr
    users = [f"admin on >{ADMIN_PASSWORD} ~* &* +@all", "default off"]
    users.append(printed.stdout.strip().removeprefix("user "))  # RedisServer adds `--user`
    server = RedisServer(acl_users=users).start()
    try:
        yield server
    finally:
        server.cleanup()


async def echo(job: JobPayload) -> dict[str, str]:
    return {"echo": job.job_id}


async def test_a_worker_scoped_by_the_cli_works_its_type_only(scoped_server: RedisServer) -> None:
    admin_url = scoped_server.url_for("admin", ADMIN_PASSWORD)
    worker_url = scoped_server.url_for("w1", WORKER_PASSWORD)
    # Both types hold a waiting job; both JobStore agents a record.
    async with await JobQueue.connect(fast_settings(admin_url)) as admin_queue:
        own_job, other_job = make_job(task="own"), make_job("flights", task="other")
        await admin_queue.enqueue(own_job)
        await admin_queue.enqueue(other_job)
    admin = aioredis.Redis.from_url(admin_url, decode_responses=True)
    for store in (OWN_STORE, OTHER_STORE):
        await admin.hset(store.record("s1"), mapping={"status": "pending"})

    # The worker user does the whole job on its own type...
    settings = fast_settings(worker_url, agent_types=("dining",))
    async with running_worker(settings, echo), await JobQueue.connect(settings) as queue:
        await eventually(lambda: queue.get_result(own_job["job_id"]))
    assert (await admin.hgetall(OWN.stats))["completed"] == "1"

    # ...and Redis refuses it everything of the other type and the other agent.
    worker = aioredis.Redis.from_url(worker_url, decode_responses=True)
    attempts: list[tuple[Any, ...]] = [
        ("LMOVE", OTHER.queue, OTHER.processing, "RIGHT", "LEFT"),
        ("LRANGE", OTHER.queue, 0, -1),
        ("HGETALL", OTHER.job(other_job["job_id"])),
        ("SET", OTHER.result(other_job["job_id"]), "{}"),
        ("HINCRBY", OTHER.stats, "completed", 1),
        ("PUBLISH", OTHER.channel, other_job["job_id"]),
        ("HGETALL", OTHER_STORE.record("s1")),
        ("HSET", OTHER_STORE.record("s1"), "status", "succeeded"),
        ("DEL", OTHER_STORE.record("s1")),
    ]
    try:
        for attempt in attempts:
            with pytest.raises(NoPermissionError):
                await worker.execute_command(*attempt)  # type: ignore[no-untyped-call]
        assert await worker.hgetall(OWN_STORE.record("s1")) == {"status": "pending"}
        assert await admin.lrange(OTHER.queue, 0, -1) == [other_job["job_id"]]
        assert await admin.hget(OTHER_STORE.record("s1"), "status") == "pending"
    finally:
        await worker.aclose()
        await admin.aclose()
