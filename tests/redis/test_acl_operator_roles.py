"""The reader and operator roles as the operator tools use them: every `agentjobs`
command and console page runs under a real ACL user (QUEUE_REDIS_URL with its
credentials); what the role is for succeeds, everything else fails in one line naming
Redis' refusal (NoPermissionError) and changes no key."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
from redis.exceptions import NoPermissionError

from platform_common.jobs import acl
from platform_common.jobs.cli import main
from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobPayload, JobQueue, NonRetryableError, QueueSettings
from platform_common.jobs.redis.script import Script
from tests.console.conftest import PREFIX, client_of, console_app, csrf_token
from tests.redis.conftest import ADMIN_PASSWORD
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import RanJobs, eventually, fast_settings, running_worker
from tests.support.redis_server import RedisServer

PASSWORD = {"reader": "reader-pw-77c1", "operator": "operator-pw-b90d"}
# Both roles are scoped to dining, and configured so (QUEUE_AGENT_TYPES) as the docs
# say; flights is someone else's.
DINING, FLIGHTS = QueueKeys("dining"), QueueKeys("flights")
READ_COMMANDS = (
    ("info",),
    ("info", "dining", "-o", "json"),
    ("workers", "dining", "-o", "json"),
    ("job", "show", "dining", "{dead}"),
    ("job", "show", "dining", "{done}", "-o", "json"),
    ("dead", "list", "dining", "-o", "json"),
    ("dead", "list", "dining", "--error-matches", "declined"),
    ("dead", "show", "dining", "{dead}"),
    ("dead", "requeue", "dining", "--all", "--dry-run"),
    ("dead", "requeue", "dining", "--id", "{dead}", "--dry-run"),
    ("dead", "purge", "dining", "--error-matches", "declined", "--dry-run"),
    ("failed", "list", "dining", "-o", "json"),
    ("failed", "show", "dining", "{failed}"),
    ("failed", "requeue", "dining", "--id", "{failed}", "--dry-run"),
    ("failed", "purge", "dining", "--all", "--dry-run"),
)
CHANGES = (
    ("dead", "requeue", "dining", "--id", "{dead}"),
    ("dead", "requeue", "dining", "--all"),
    ("dead", "purge", "dining", "--id", "{dead}", "--yes"),
    ("dead", "purge", "dining", "--all", "--yes"),
    ("failed", "requeue", "dining", "--id", "{failed}"),
    ("failed", "purge", "dining", "--all", "--yes"),
    ("pause", "dining"),
    ("resume", "dining"),
)
OTHER_TYPE = (
    ("info", "flights"),
    ("job", "show", "flights", "{flights}"),
    ("dead", "list", "flights"),
)


@dataclass(frozen=True)
class Scene:
    """What the queue holds, as real workers left it: two dead letters, a finished job,
    a delayed retry, a job failed for good, one flights job; with `held`, a running job
    and two waiting."""

    dead: tuple[str, str]
    done: str
    delayed: str
    flights: str
    failed: str
    running: str = ""
    waiting: tuple[str, ...] = ()

    def fill(self, args: tuple[str, ...]) -> list[str]:
        ids = {
            "dead": self.dead[0], "done": self.done, "flights": self.flights,
            "failed": self.failed,
        }  # fmt: skip
        return [arg.format(**ids) for arg in args]


@dataclass
class Ran:
    code: int
    out: str
    err: str

    def refused_line(self) -> str:
        """A refusal as the CLI reports it: exit 1, one line naming Redis' NOPERM."""
        assert self.code == 1, (self.code, self.out, self.err)
        lines = self.err.splitlines()
        assert len(lines) == 1 and "Traceback" not in self.err, self.err
        assert lines[0].startswith("error: Redis: NoPermissionError: "), lines[0]
        return lines[0]


def role_users() -> list[str]:
    """Every role, scoped to `dining` (tests/redis/conftest.py starts the acl_server)."""
    return [
        acl.acl_file_line(role, password, role, agent_types=["dining"]).removeprefix("user ")
        for role, password in PASSWORD.items()
    ]


def role_url(acl_server: RedisServer, role: str) -> str:
    return acl_server.url_for(role, PASSWORD[role])


def admin_settings(acl_server: RedisServer, **overrides: Any) -> QueueSettings:
    # A long backoff keeps the retried job delayed for the whole test.
    return fast_settings(
        acl_server.url_for("admin", ADMIN_PASSWORD), agent_types=("dining", "flights"),
        backoff_base=120.0, **overrides,
    )  # fmt: skip


def handler(release: asyncio.Event) -> Any:
    async def handle(job: JobPayload) -> dict[str, str]:
        kind = job.constraints.get("kind")
        if kind == "hold":
            await release.wait()
        elif kind == "fail":
            raise RuntimeError(job.constraints["error"])
        elif kind == "refuse":
            raise NonRetryableError(job.constraints["error"])
        return {"booked": job.task}

    return handle


def job(kind: str, **constraints: Any) -> dict[str, Any]:
    return make_job(constraints={"kind": kind, **constraints})


@pytest.fixture
async def scene(acl_server: RedisServer, admin: aioredis.Redis) -> Scene:
    release = asyncio.Event()
    release.set()
    async with await JobQueue.connect(admin_settings(acl_server, max_attempts=1)) as once:
        dead = await once.enqueue_many(
            [job("fail", error="card declined"), job("fail", error="venue timeout")]
        )
        done = await once.enqueue(job("ok"))
        failed = await once.enqueue(job("refuse", error="no such venue"))
        flights = await once.enqueue(make_job("flights"))
        async with await JobQueue.connect(admin_settings(acl_server, max_attempts=2)) as twice:
            delayed = await twice.enqueue(job("fail", error="try later"))

        async def settled() -> bool:
            stats = await once.stats("dining")
            finished = await once.get_result(done, "dining")
            refused = await once.failed_jobs.count("dining")
            return stats.dead == 2 and stats.delayed == 1 and finished is not None and refused == 1

        async with running_worker(once.settings, handler(release)):
            await eventually(settled)
    return Scene((dead[0], dead[1]), done, delayed, flights, failed)


@pytest.fixture
async def held(acl_server: RedisServer, scene: Scene) -> AsyncIterator[Scene]:
    """The scene plus a worker (one slot) running a job until the test ends, and two
    jobs waiting behind it: every list the operator tools page through has an entry."""
    release = asyncio.Event()
    settings = admin_settings(acl_server, max_attempts=1)
    async with (
        await JobQueue.connect(settings) as queue,
        running_worker(settings, handler(release), concurrency=1),
    ):
        running = await queue.enqueue(job("hold"))

        async def is_running() -> bool:
            state = await queue.connection.client.hget(DINING.job(running), "state")
            return bool(state == "running")

        await eventually(is_running)
        waiting = await queue.enqueue_many([job("ok"), job("ok")])
        try:
            yield Scene(scene.dead, scene.done, scene.delayed, scene.flights, scene.failed,
                        running, tuple(waiting))  # fmt: skip
        finally:
            release.set()


@pytest.fixture
def agentjobs(
    acl_server: RedisServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Any:
    """Run `agentjobs <args>` in this process as `role` (QUEUE_REDIS_URL carries its
    user), in a thread: the command runs its own event loop beside the test's worker."""
    for name in ("REDIS_URL", "AGENTJOBS_DEBUG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", "200")

    async def run(role: str, args: list[str], agent_types: str = "dining") -> Ran:
        monkeypatch.setenv("QUEUE_REDIS_URL", role_url(acl_server, role))
        monkeypatch.setenv("QUEUE_AGENT_TYPES", agent_types)
        capsys.readouterr()
        code = await asyncio.to_thread(main, args)
        captured = capsys.readouterr()
        return Ran(code, captured.out, captured.err)

    return run


async def everything(admin: aioredis.Redis) -> dict[str, bytes]:
    """Every key's DUMP: a refused command must leave all of them as they were."""
    return {key: await admin.dump(key) for key in await admin.keys("*")}


# -- the CLI ------------------------------------------------------------------------------
@pytest.mark.parametrize("role", ["reader", "operator"])
async def test_every_read_command_runs_under_the_role(
    agentjobs: Any, held: Scene, role: str
) -> None:
    for args in READ_COMMANDS:
        done = await agentjobs(role, held.fill(args))
        assert done.code == 0, (args, done.err)
        if args != ("info",):
            assert done.err == "" or "dry run" in done.err.lower(), (args, done.err)
    # Every type Redis has seen is listed but flights, which the role may not read: it
    # is named in a note, not a failure.
    every = await agentjobs(role, ["info", "-o", "json"])
    assert [t["agent_type"] for t in json.loads(every.out)["types"]] == ["dining"]
    assert every.err == "note: agent types this Redis user may not read, left out: flights\n"
    info = json.loads((await agentjobs(role, ["info", "dining", "-o", "json"])).out)
    [dining] = info["types"]
    counts = [dining[name] for name in ("queued", "running", "delayed", "dead")]
    assert counts == [2, 1, 1, 2] and dining["active_workers"] == 1
    assert dining["oldest_waiting_seconds"] is not None
    workers = json.loads((await agentjobs(role, ["workers", "dining", "-o", "json"])).out)
    assert [w["jobs_in_progress"] for w in workers["workers"]] == [[held.running]]
    shown = await agentjobs(role, ["job", "show", "dining", held.done, "-o", "json"])
    assert json.loads(shown.out)["result"]["result"] == {"booked": make_job()["task"]}
    letters = json.loads((await agentjobs(role, ["dead", "list", "dining", "-o", "json"])).out)
    assert {letter["job_id"] for letter in letters["letters"]} == set(held.dead)
    dry = await agentjobs(role, ["dead", "requeue", "dining", "--all", "--dry-run"])
    assert "2" in dry.out + dry.err


@pytest.mark.parametrize("role", ["reader", "operator"])
async def test_another_agent_type_is_refused_in_one_line(
    agentjobs: Any, admin: aioredis.Redis, scene: Scene, role: str
) -> None:
    before = await everything(admin)
    for args in OTHER_TYPE:
        ran = await agentjobs(role, scene.fill(args), agent_types="dining,flights")
        line = ran.refused_line()
        assert "flights" in line or "permissions" in line, line
    assert await everything(admin) == before


async def test_a_reader_is_refused_every_change_in_one_line(
    agentjobs: Any, admin: aioredis.Redis, scene: Scene
) -> None:
    before = await everything(admin)
    for args in CHANGES:
        line = (await agentjobs("reader", scene.fill(args))).refused_line()
        assert "'evalsha'" in line or "'eval'" in line, line  # the scripts: never run
    assert await everything(admin) == before


async def test_an_operator_requeues_and_purges_dead_letters(
    agentjobs: Any, admin: aioredis.Redis, scene: Scene
) -> None:
    first, second = scene.dead
    requeued = await agentjobs("operator", ["dead", "requeue", "dining", "--id", first])
    assert requeued.code == 0, requeued.err
    assert await admin.hget(DINING.job(first), "state") is None  # queued: no state
    assert await admin.lrange(DINING.queue, 0, -1) == [first]
    assert await admin.lrange(DINING.dead, 0, -1) == [second]
    matched = await agentjobs(
        "operator", ["dead", "purge", "dining", "--error-matches", "timeout", "--yes"]
    )
    assert matched.code == 0, matched.err
    assert await admin.exists(DINING.job(second)) == 0
    assert await admin.llen(DINING.dead) == 0
    # Counted as enqueued again, as the worker's own requeue counts it.
    assert await admin.hget(DINING.stats, "enqueued") == "6"


@pytest.mark.parametrize("action", ["requeue", "purge"])
async def test_an_operator_requeues_and_purges_failed_jobs(
    agentjobs: Any, admin: aioredis.Redis, scene: Scene, action: str
) -> None:
    confirmed = ["--yes"] if action == "purge" else []
    done = await agentjobs("operator", ["failed", action, "dining", "--all", *confirmed])
    assert done.code == 0, done.err
    assert done.out.startswith(f"{action}d 1 of 1 selected failed job(s)"), done.out
    assert await admin.llen(DINING.failed) == 0
    queued = [scene.failed] if action == "requeue" else []
    assert await admin.lrange(DINING.queue, 0, -1) == queued
    assert await admin.exists(DINING.job(scene.failed)) == (action == "requeue")
    assert await admin.llen(DINING.dead) == 2  # the other list: untouched


async def test_an_operator_pauses_and_resumes_its_agent_type_only(
    agentjobs: Any, admin: aioredis.Redis, scene: Scene
) -> None:
    paused = await agentjobs("operator", ["pause", "dining"])
    assert paused.code == 0 and paused.out.startswith("dining: paused at "), paused.err
    assert await admin.exists(DINING.paused) == 1
    info = json.loads((await agentjobs("reader", ["info", "dining", "-o", "json"])).out)
    assert info["types"][0]["paused"] is True
    resumed = await agentjobs("operator", ["resume", "dining"])
    assert resumed.code == 0 and resumed.out.startswith("dining: resumed "), resumed.err
    assert await admin.exists(DINING.paused) == 0
    before = await everything(admin)
    other = await agentjobs("operator", ["pause", "flights"], agent_types="dining,flights")
    assert "permissions to access one of the keys" in other.refused_line()
    assert await everything(admin) == before


async def test_an_operator_sets_limits_a_reader_only_reads_them(
    agentjobs: Any, admin: aioredis.Redis, scene: Scene
) -> None:
    done = await agentjobs("operator", ["limits", "set", "dining", "--rate", "20/s",
                                        "--max-running", "3"])  # fmt: skip
    assert done.code == 0, done.err
    assert await admin.hgetall(DINING.limits) == {
        "rate": "20", "interval_ms": "1000", "max_running": "3"
    }  # fmt: skip
    shown = json.loads((await agentjobs("reader", ["limits", "show", "dining", "-o", "json"])).out)
    assert (shown["rate"], shown["max_running"]) == ("20/s", 3)
    before = await everything(admin)
    refused = await agentjobs("reader", ["limits", "set", "dining", "--rate", "none"])
    assert "'evalsha'" in refused.refused_line() or "'eval'" in refused.refused_line()
    other = await agentjobs(
        "operator", ["limits", "set", "flights", "--max-running", "1"],
        agent_types="dining,flights",
    )  # fmt: skip
    assert "permissions to access one of the keys" in other.refused_line()
    assert await everything(admin) == before


# -- the package's API and raw commands, as the roles' users -----------------------------
@pytest.mark.parametrize("role", ["reader", "operator"])
async def test_connecting_checks_the_eviction_policy_unrefused(
    acl_server: RedisServer, admin: aioredis.Redis, role: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Every tool connects as JobQueue.connect does, which reads INFO memory: refused, it
    # would log that the policy could not be checked.
    caplog.set_level(logging.WARNING, logger="platform_common.jobs")
    settings = QueueSettings.from_url(role_url(acl_server, role), agent_types=("dining",))
    async with await JobQueue.connect(settings) as queue:
        assert await queue.ping()
    assert [record.getMessage() for record in caplog.records] == []


async def test_a_reader_can_neither_enqueue_delete_nor_run_scripts(
    acl_server: RedisServer, admin: aioredis.Redis, scene: Scene
) -> None:
    before = await everything(admin)
    settings = QueueSettings.from_url(role_url(acl_server, "reader"), agent_types=("dining",))
    async with await JobQueue.connect(settings) as queue:
        with pytest.raises(NoPermissionError):
            await queue.enqueue(make_job())
        with pytest.raises(NoPermissionError):
            await queue.dead_letters.purge("dining", list(scene.dead))
    client = aioredis.Redis.from_url(role_url(acl_server, "reader"), decode_responses=True)
    try:
        for command in (
            ("DEL", DINING.job(scene.dead[0])),
            ("DEL", DINING.dead),
            ("HSET", DINING.job(scene.dead[0]), "state", "queued"),
            ("EVAL", "return 1", 0),
            ("EVAL_RO", "return 1", 0),
        ):
            with pytest.raises(NoPermissionError):
                await client.execute_command(*command)  # type: ignore[no-untyped-call]
    finally:
        await client.aclose()
    assert await everything(admin) == before


def _script(name: str, keys: list[str], args: list[Any]) -> tuple[Any, ...]:
    # By source, as a client sends it after NOSCRIPT: no script needs to be cached.
    return ("EVAL", Script.named(name).source, len(keys), *keys, *args)


async def test_an_operator_cannot_enqueue_claim_or_complete(
    acl_server: RedisServer, admin: aioredis.Redis, scene: Scene
) -> None:
    await admin.lmove(DINING.queue, DINING.processing, "RIGHT", "LEFT")  # as BLMOVE takes it
    before = await everything(admin)
    settings = QueueSettings.from_url(role_url(acl_server, "operator"), agent_types=("dining",))
    async with await JobQueue.connect(settings) as queue:
        # Before the enqueue script (whose EXISTS it lacks; the matrix runs that), the
        # type registration (SADD jobs:types) is refused.
        with pytest.raises(NoPermissionError):
            await queue.enqueue(make_job())
    taken = scene.delayed
    claim = _script(
        "queue_claim",
        [DINING.processing, DINING.leases, DINING.stats, DINING.expiry, DINING.queue,
         DINING.waiting, DINING.queued, DINING.arrivals, DINING.arrived, DINING.paused,
         DINING.job(taken), DINING.result(taken)],
        [60_000, "operator-1", DINING.channel, 1000, taken, "token-1"],
    )  # fmt: skip
    complete = _script(
        "queue_complete",
        [DINING.processing, DINING.leases, DINING.expiry, DINING.stats, DINING.job(taken),
         DINING.result(taken), DINING.cancels],
        [DINING.channel, 0, "_le:+Inf", taken, "token-1", '{"forged": true}'],
    )  # fmt: skip
    client = aioredis.Redis.from_url(role_url(acl_server, "operator"), decode_responses=True)
    try:
        for command in (
            claim,
            complete,
            ("LMOVE", DINING.queue, DINING.processing, "RIGHT", "LEFT"),
            # (SET of a result, PUBLISH and ZREM of the expiry set: the cancel script's,
            # see note 5 of docs/operations.md)
            ("DEL", DINING.queue),
        ):
            with pytest.raises(NoPermissionError):
                await client.execute_command(*command)  # type: ignore[no-untyped-call]
    finally:
        await client.aclose()
    assert await everything(admin) == before


async def test_no_job_an_operator_writes_runs(
    acl_server: RedisServer, admin: aioredis.Redis, scene: Scene
) -> None:
    """A requeue needs LPUSH of the queue list and ZADD of the expiry and waiting sets,
    so an operator can put any id there; it cannot write a packed job (no HSET of the
    queued hash), and a job hash it makes of numbers alone (HINCRBY) has no payload,
    which the worker fails as corrupt without running a handler. (HSET of a job hash,
    which the cancel script needs, is note 5 of docs/operations.md: the matrix's "inject
    a job that waits".)"""
    seconds, micros = await admin.time()
    deadline = seconds * 1000 + micros // 1000 + 60_000
    operator = aioredis.Redis.from_url(role_url(acl_server, "operator"), decode_responses=True)
    forged = ("forged-nothing", "forged-packed", "forged-numbers")
    try:
        for command in (
            ("HSET", DINING.queued, forged[1], f"{deadline - 60_000},{deadline},60,1,\n\n{{}}"),
        ):  # fmt: skip
            with pytest.raises(NoPermissionError):
                await operator.execute_command(*command)  # type: ignore[no-untyped-call]
        for field, number in (("expires_at", deadline), ("ttl", 60), ("max_attempts", 1)):
            await operator.hincrby(DINING.job(forged[2]), field, number)
        for job_id in forged:
            await operator.zadd(DINING.expiry, {job_id: deadline})
            await operator.zadd(DINING.waiting, {job_id: deadline - 60_000})
            await operator.lpush(DINING.queue, job_id)
    finally:
        await operator.aclose()
    ran = RanJobs()
    settings = admin_settings(acl_server)
    async with await JobQueue.connect(settings) as queue, running_worker(settings, ran):
        result = await eventually(lambda: queue.get_result(forged[2], "dining"))
        await eventually(lambda: _drained(admin))
    assert not result.ok and "payload" in (result.error or ""), result
    assert ran.ran == []  # the scene's one waiting job is delayed, for minutes
    for job_id in forged[:2]:
        assert await admin.exists(DINING.job(job_id), DINING.result(job_id)) == 0


async def _drained(admin: aioredis.Redis) -> bool:
    return bool(await admin.llen(DINING.queue) == await admin.llen(DINING.processing) == 0)


# -- the console ------------------------------------------------------------------------
def _pages(scene: Scene) -> dict[str, str]:
    """Each GET page, and a text it must show."""
    base = f"{PREFIX}/types/dining"
    return {
        f"{PREFIX}/": 'list=waiting">2</a>',
        f"{base}?list=waiting": scene.waiting[0],
        f"{base}?list=running": scene.running,
        f"{base}?list=delayed": scene.delayed,
        f"{base}?list=dead": scene.dead[0],
        f"{base}?list=failed": scene.failed,
        f"{base}/jobs/{scene.dead[0]}": "card declined",
        f"{base}/jobs/{scene.done}": "booked",
        f"{base}/dead": scene.dead[1],
        f"{base}/dead?error=declined": scene.dead[0],
        f"{base}/failed": scene.failed,
        f"{PREFIX}/static/console.css": "",
    }


@pytest.mark.parametrize("role", ["reader", "operator"])
async def test_every_console_page_renders_under_the_role(
    acl_server: RedisServer, held: Scene, role: str
) -> None:
    settings = QueueSettings.from_url(role_url(acl_server, role), agent_types=("dining",))
    async with await JobQueue.connect(settings) as queue:
        app = console_app(queue, read_only=role == "reader")
        async with client_of(app) as browser:
            for path, shown in _pages(held).items():
                page = await browser.get(path)
                assert page.status_code == 200, (path, page.text)
                assert shown in page.text, path


async def _requeue_through_the_console(browser: httpx.AsyncClient, job_id: str) -> httpx.Response:
    dead = f"{PREFIX}/types/dining/dead"
    form = {"csrf": csrf_token((await browser.get(dead)).text), "do": "requeue:selected",
            "error": "", "ids": [job_id]}  # fmt: skip
    confirm = await browser.post(f"{dead}/confirm", data=form)
    assert confirm.status_code == 200, confirm.text
    count = re.search(r'name="count" value="(\d+)"', confirm.text)
    assert count is not None and count[1] == "1", confirm.text
    return await browser.post(f"{dead}/act", data={**form, "count": count[1]})


async def test_a_read_write_console_requeues_as_the_operator(
    acl_server: RedisServer, admin: aioredis.Redis, scene: Scene
) -> None:
    settings = QueueSettings.from_url(role_url(acl_server, "operator"), agent_types=("dining",))
    async with (
        await JobQueue.connect(settings) as queue,
        client_of(console_app(queue)) as browser,
    ):
        done = await _requeue_through_the_console(browser, scene.dead[0])
    assert done.status_code == 200 and "Requeued 1 of 1" in done.text
    assert await admin.hget(DINING.job(scene.dead[0]), "state") is None  # queued
    assert await admin.lrange(DINING.queue, 0, -1) == [scene.dead[0]]


async def test_a_read_write_console_under_the_reader_changes_nothing(
    acl_server: RedisServer, admin: aioredis.Redis, scene: Scene
) -> None:
    # Misconfigured (read-write, with the reader's user): Redis refuses the change.
    before = await everything(admin)
    settings = QueueSettings.from_url(role_url(acl_server, "reader"), agent_types=("dining",))
    async with (
        await JobQueue.connect(settings) as queue,
        client_of(console_app(queue)) as browser,
    ):
        refused = await _requeue_through_the_console(browser, scene.dead[0])
    assert refused.status_code == 403
    assert "Redis refused the console&#39;s user" in refused.text
    assert await everything(admin) == before


@pytest.mark.parametrize("role", ["reader", "operator"])
async def test_a_read_write_console_pauses_as_the_operator_only(
    acl_server: RedisServer, admin: aioredis.Redis, scene: Scene, role: str
) -> None:
    before = await everything(admin)
    settings = QueueSettings.from_url(role_url(acl_server, role), agent_types=("dining",))
    page = f"{PREFIX}/types/dining"
    async with (
        await JobQueue.connect(settings) as queue,
        client_of(console_app(queue)) as browser,
    ):
        csrf = csrf_token((await browser.get(page)).text)
        paused = await browser.post(f"{page}/pause", data={"csrf": csrf, "do": "pause"})
    if role == "operator":
        assert paused.status_code == 200 and "dining is paused" in paused.text
        assert await admin.exists(DINING.paused) == 1
    else:
        assert paused.status_code == 403
        assert "Redis refused the console&#39;s user" in paused.text
        assert await everything(admin) == before
