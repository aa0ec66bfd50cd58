"""ACL roles: rules load as written, match the docs and the scripts; each role does its job."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from platform_common.jobs import JobStatus, acl, make_job_store
from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import (
    Completion,
    JobPayload,
    JobQueue,
    NonRetryableError,
    current_job,
)
from platform_common.jobs_exporter.service import Exporter
from platform_common.jobs_exporter.settings import ExporterSettings
from tests.support.paths import REPO_ROOT
from tests.support.previous_layout import due_in, previous_enqueue
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import eventually, fast_settings, running_worker
from tests.support.redis_server import RedisServer

ROLE_PASSWORD = {role: f"{role}-pw-7d1c" for role in acl.ROLES}
DOCS = REPO_ROOT / "docs" / "operations.md"
# The whole-job test runs producer and worker scoped to the one type it uses, each with
# its own JobStore agent: a rule that is too narrow fails it.
AGENT_TYPE = "dining"


def scope(role: str) -> dict[str, Any]:
    spec = acl.ROLES[role]
    options: dict[str, Any] = {"agent_types": [AGENT_TYPE]} if spec.scoped else {}
    if spec.uses_store:
        options["store_agents"] = [f"{role}-agent"]
    return options


def role_users() -> list[str]:
    """Every role, each scoped as `scope` says (tests/redis/conftest.py starts the server)."""
    users: list[str] = []
    # RedisServer passes each entry as `--user <tokens>`: the file line minus "user ".
    users += [
        acl.acl_file_line(role, ROLE_PASSWORD[role], role, **scope(role)).removeprefix("user ")
        for role in acl.ROLES
    ]
    return users


def test_docs_show_the_rules_of_every_role() -> None:
    text = DOCS.read_text(encoding="utf-8")
    block = re.search(r"<!-- acl-rules:start -->\n(.*)<!-- acl-rules:end -->", text, re.S)
    assert block is not None, "docs/operations.md lost its acl-rules markers"
    assert block.group(1) == acl.markdown(), (
        "docs/operations.md is stale: paste `python -m platform_common.jobs acl` "
        "between the acl-rules markers"
    )


def test_every_script_command_is_known_to_redis() -> None:
    # A typo in a rule would make redis-server refuse the whole user at start; this
    # catches a parsing slip in script_commands before that.
    for role in acl.ROLES.values():
        for command in role.all_commands():
            assert re.fullmatch(r"[a-z_]+(\|[a-z_-]+)?", command), command


@pytest.mark.parametrize("role", list(acl.ROLES))
def test_every_command_a_script_calls_is_granted(role: str) -> None:
    # The read-only roles run none.
    assert bool(acl.ROLES[role].scripts) == (role not in ("exporter", "reader"))
    assert acl.ungranted_script_commands(role) == frozenset()


def test_scopes_are_checked() -> None:
    with pytest.raises(ValueError, match="no scope"):
        acl.rules("exporter", agent_types=["dining"])
    with pytest.raises(ValueError, match="empty"):
        acl.rules("worker", agent_types=[])
    with pytest.raises(ValueError):
        acl.rules("worker", agent_types=["din*"])  # a glob would match other types
    with pytest.raises(ValueError, match="no JobStore"):
        acl.rules("operator", agent_types=["dining"], store_agents=["orders"])
    # The prefixes by the queue's own rule: a glob or a space would widen or split a rule.
    for prefixes in ({"queue_prefix": "*"}, {"queue_prefix": "a b"}, {"store_prefix": "x?"}):
        with pytest.raises(ValueError, match="must be 1-63 chars"):
            acl.rules("producer", **prefixes)
    with pytest.raises(ValueError, match="queue_prefix"):
        acl.markdown(queue_prefix="jobs:*")


async def _categories(admin: aioredis.Redis) -> dict[str, set[str]]:
    """Each ACL category's commands, as this server defines them."""
    names = await admin.execute_command("ACL", "CAT")  # type: ignore[no-untyped-call]
    return {
        name: set(await admin.execute_command("ACL", "CAT", name))  # type: ignore[no-untyped-call]
        for name in names
    }


def _expanded(rules: str, categories: dict[str, set[str]]) -> frozenset[str]:
    """A selector's command rules as the `+command` tokens they allow: Redis reports a
    set that covers most of a category as `+@category -command...` (shorter)."""
    allowed: set[str] = set()
    for token in rules.split():
        if token == "-@all":
            continue
        sign, name = token[0], token[1:]
        names = categories[name[1:]] if name.startswith("@") else {name}
        allowed = allowed | names if sign == "+" else allowed - names
    return frozenset("+" + name for name in allowed)


def _selector_sets(flat: list[Any], categories: dict[str, set[str]]) -> dict[str, Any]:
    info = dict(zip(flat[::2], flat[1::2], strict=True))
    selectors = set()
    for selector in info["selectors"]:
        fields = dict(zip(selector[::2], selector[1::2], strict=True))
        commands = _expanded(fields["commands"], categories)
        selectors.add((commands, frozenset(fields["keys"].split())))
    return {
        "commands": set(info["commands"].split()),
        "keys": info["keys"],
        "channels": set(info["channels"].split()),
        "selectors": selectors,
    }


def _expected_selectors(rules: list[str]) -> set[tuple[frozenset[str], frozenset[str]]]:
    expected = set()
    for token in rules:
        if token.startswith("("):
            words = token.strip("()").split()
            commands = frozenset(w for w in words if w.startswith("+"))
            expected.add((commands, frozenset(w for w in words if "~" in w)))
    return expected


@pytest.mark.parametrize("scoped", [False, True], ids=["every-type", "scoped"])
async def test_rules_load_and_match_what_redis_reports(
    acl_server: RedisServer, admin: aioredis.Redis, scoped: bool
) -> None:
    categories = await _categories(admin)
    for role in acl.ROLES:
        options = scope(role) if scoped else {}
        command = acl.setuser_command(f"{role}-2", role, ROLE_PASSWORD[role], **options)
        reply = await admin.execute_command(*command)  # type: ignore[no-untyped-call]
        assert reply in ("OK", True, b"OK")
        flat = await admin.execute_command("ACL", "GETUSER", f"{role}-2")  # type: ignore[no-untyped-call]
        info = _selector_sets(flat, categories)
        rules = acl.rules(role, **options)
        root = {token for token in rules if token.startswith(("+", "-"))}
        assert info["commands"] == root  # -@all and the keyless commands only
        assert info["keys"] == ""  # no key at the root: every keyed command is in a grant
        assert info["channels"] == {token for token in rules if token.startswith("&")}
        assert info["selectors"] == _expected_selectors(rules)
        # (+ the selector of a role's completion PUBLISH: its channels, no key)
        publishes = acl.ROLES[role].publishes_completions
        assert len(info["selectors"]) == len(acl.ROLES[role].grants) + publishes


# -- each role doing its whole job under its own user ---------------------------------
def role_url(server: RedisServer, role: str) -> str:
    return server.url_for(role, ROLE_PASSWORD[role])


async def echo(job: JobPayload) -> dict[str, str]:
    await current_job().report_progress({"echoing": job.job_id})  # its script and PUBLISH
    return {"echo": job.job_id}


async def fail(job: JobPayload) -> None:
    raise RuntimeError("always")


async def test_each_role_does_its_whole_job_under_its_own_user(
    acl_server: RedisServer, admin: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    # A scoped role's queue settings name the same types (get_result looks in each).
    only = {"max_attempts": 1, "agent_types": (AGENT_TYPE,)}
    producer_settings = fast_settings(role_url(acl_server, "producer"), **only)
    worker_settings = fast_settings(role_url(acl_server, "worker"), **only)
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
            # The worker user reported; the producer reads it and SUBSCRIBEs to the events.
            progress = await producer.progress("dining", jobs[0]["job_id"])
            assert progress is not None and progress.data == {"echoing": jobs[0]["job_id"]}
            async with producer.progress_events("dining", watch=[jobs[0]["job_id"]]) as events:
                assert await asyncio.wait_for(anext(events), 20) == progress
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

        # Both ways a waiting job expires, under the worker user: its bucket (a job the
        # previous release wrote, a minute past its deadline) and the tail scan (a job
        # in deadline order, behind it on the list).
        bucketed = due_in(-60)
        await previous_enqueue(admin, QueueKeys(AGENT_TYPE), bucketed)
        in_order = due_in(0.3)
        await operator.enqueue(in_order)
        expired: list[str] = []

        async def both_expired() -> bool:
            expired.extend(await operator.cleanup("dining"))
            return len(expired) >= 2

        await eventually(both_expired)
        assert sorted(expired) == sorted([bucketed["job_id"], in_order["job_id"]])
        assert await admin.llen(QueueKeys(AGENT_TYPE).queue) == 0

    # The JobStore under both application roles, time index included: a refused index
    # read would only log a warning and fall back to the legacy scan, so look for one.
    caplog.set_level(logging.WARNING, logger="platform_common.jobs.store")
    for role in ("producer", "worker"):
        store = make_job_store(role_url(acl_server, role), agent=f"{role}-agent")
        store.time_index = True
        try:
            await store.create("j1", {"n": 1}, ttl_seconds=60, owner_oid="owner-1")
            await store.update("j1", status=JobStatus.RUNNING)
            assert await store.exists("j1") and await store.list_ids() == ["j1"]
            page = await store.list_for_owner("owner-1", limit=5)
            assert [row.job_id for row in page.rows] == ["j1"]
            assert await store.sweep_time_index() == 0
            assert await store.delete("j1")
        finally:
            await store.close()
    assert [r.getMessage() for r in caplog.records if ".store" in r.name] == []

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


async def by_kind(job: JobPayload) -> str:
    kind = job.constraints.get("kind")
    if kind == "fatal":
        raise NonRetryableError("malformed")
    if kind == "flaky":
        raise RuntimeError("try again")
    if kind == "slow":
        await asyncio.sleep(1.5)  # longer than the lease: the lease keeper renews it
    return current_job().job_id


async def test_a_worker_user_walks_every_path_of_its_scripts(
    acl_server: RedisServer, admin: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """Each write a worker's scripts make, on the key it makes it to, under the worker's
    own user (its grants name each command on its kinds of key only): takes of several
    jobs (their marker), renewals, retries promoted from the delayed set, a job taken
    by BLMOVE and never claimed (the reaper), jobs failed for good and dead-lettered,
    both lists pruned past their cap, and a requeue and a purge of the failed list."""
    caplog.set_level(logging.WARNING, logger="platform_common.jobs")
    keys = QueueKeys(AGENT_TYPE)
    settings = fast_settings(
        role_url(acl_server, "worker"), agent_types=(AGENT_TYPE,), max_attempts=2,
        dead_letter_max=1, fetch_batch=8, backoff_base=0.05,
    )  # fmt: skip
    kinds = ["ok"] * 24 + ["slow", "fatal", "fatal", "flaky", "flaky"]
    jobs = [make_job(task=f"{k} {i}", constraints={"kind": k}) for i, k in enumerate(kinds)]
    async with await JobQueue.connect(settings) as queue:
        stray = make_job(task="taken, never claimed", constraints={"kind": "ok"})
        await queue.enqueue(stray)
        # A worker's BLMOVE whose claim never came: the reaper gives it back.
        await admin.lmove(keys.queue, keys.processing, "RIGHT", "LEFT")
        await queue.enqueue_many(jobs)

        async def settled() -> bool:
            stats = await admin.hgetall(keys.stats)
            ended = sum(int(stats.get(name, 0)) for name in ("completed", "failed"))
            return ended == len(jobs) + 1

        async with running_worker(settings, by_kind, concurrency=8):
            await eventually(settled)
            # Both kept lists pruned to their cap of one (entry, record and result).
            await eventually(lambda: _lengths_are(admin, [keys.dead, keys.failed], 1))
        stats = await admin.hgetall(keys.stats)
        # Every ok job, the slow one (renewed, never lost) and the stray one completed.
        assert (stats["completed"], stats["failed"], stats["dead_lettered"]) == ("26", "4", "2")
        [fatal] = await admin.lrange(keys.failed, 0, -1)
        assert await queue.failed_jobs.requeue(AGENT_TYPE, [fatal]) == [fatal]
        async with running_worker(settings, by_kind):
            await eventually(lambda: _lengths_are(admin, [keys.failed], 1))
        assert await queue.failed_jobs.purge(AGENT_TYPE) == 1
    assert await admin.exists(keys.job(fatal), keys.result(fatal)) == 0
    # Nothing but the handlers' own failures: no chore refused, no lease lost.
    logged = [r.getMessage() for r in caplog.records]
    assert [line for line in logged if not line.startswith("attempt failed ")] == []


async def _lengths_are(admin: aioredis.Redis, lists: list[str], length: int) -> bool:
    return all([await admin.llen(key) == length for key in lists])


async def _take(iterator: AsyncIterator[Completion], count: int) -> AsyncIterator[Completion]:
    taken = 0
    async for item in iterator:
        yield item
        taken += 1
        if taken == count:
            return
