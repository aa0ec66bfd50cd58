"""Progress reports: a handler reports, the orchestrator reads the last report and
follows the events; reports are rate-limited per job (the last one wins), refused once
the lease is lost or the attempt ended, and hostile input is refused with nothing
stored. The script's faults: tests/queue/test_script_faults.py."""

from __future__ import annotations

import asyncio
import logging
import math
import re
from dataclasses import dataclass
from typing import Any

import pytest

from platform_common.jobs.errors import (
    CorruptQueueState,
    InvalidProgress,
    LeaseLost,
    ValidationError,
)
from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobPayload, JobQueue, Progress, current_job
from platform_common.jobs.queue.progress import encode_progress
from platform_common.jobs.validation import MAX_JSON_DEPTH
from platform_common.jobs.worker import AttemptCalls, Claim
from platform_common.jobs.worker.progress_reporter import ENDED, ProgressReporter, store_progress
from tests.support.keyspace import changed_keys
from tests.support.queue_env import QueueEnv
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import eventually, fast_settings, running_worker
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.queue(register=("dining",), max_progress_bytes=1024)

DINING = QueueKeys("dining")
TOKEN = "token-1"

GATES: dict[str, asyncio.Event] = {}
"""Job id -> the event its handler waits for between its two reports."""


@dataclass
class Env(QueueEnv):
    async def running(self) -> Claim:
        """A job taken and claimed (lease token TOKEN), as a worker holds it."""
        job_id: str = await self.queue.enqueue(make_job())
        assert await self.raw.lmove(DINING.queue, DINING.processing, "RIGHT", "LEFT") == job_id
        _, claims = await self.leases.claim("worker-1", [(job_id, TOKEN)])
        return claims[0]

    def reporter(
        self, claim: Claim, token: str = TOKEN, interval: float | None = None
    ) -> ProgressReporter:
        return ProgressReporter(
            self.queue.connection, DINING, claim.job_id, token, interval=interval
        )

    async def stored(self, job_id: str) -> dict[str, Any] | None:
        progress = await self.queue.progress("dining", job_id)
        return progress.data if progress is not None else None


async def two_steps(job: JobPayload) -> str:
    context = current_job()
    await context.report_progress({"step": 1, "note": "ünïcødé 🚀"})
    await GATES[context.job_id].wait()
    await context.report_progress({"step": 2})
    return "done"


async def test_the_last_report_is_read_while_it_runs_and_after_it_ended(env: Env) -> None:
    """On a cluster too: the script, and the event through a subscriber on any node."""
    queue = env.queue
    job = make_job()
    GATES[job["job_id"]] = gate = asyncio.Event()
    async with (
        queue.progress_events("dining", watch=[job["job_id"]]) as events,
        running_worker(queue.settings, two_steps),
    ):
        await queue.enqueue(job)
        first = await asyncio.wait_for(anext(events), 20)
        assert (first.job_id, first.data) == (job["job_id"], {"step": 1, "note": "ünïcødé 🚀"})
        stored = await queue.progress("dining", job["job_id"])
        assert stored == first  # the event carries what was stored, and when
        gate.set()
        second = await asyncio.wait_for(anext(events), 20)
        assert second.data == {"step": 2} and second.at >= first.at
        await eventually(lambda: queue.get_result(job["job_id"]))
    # Kept with the record after the completion: the report held in its window (the
    # second came within 0.1 s of the first) was stored before the outcome.
    after = await queue.progress("dining", job["job_id"])
    assert after is not None and after.data == {"step": 2}
    assert await queue.progress("dining", "never-enqueued") is None


def sync_steps(job: JobPayload) -> str:
    context = current_job()
    context.report_progress_sync({"step": "sync"})
    try:
        context.report_progress_sync({"bad": math.nan})
    except InvalidProgress as exc:
        return str(exc)
    return "NaN was accepted"


async def on_the_loop(job: JobPayload) -> str:
    try:
        current_job().report_progress_sync({"step": "wrong"})
    except RuntimeError as exc:
        return str(exc)
    return "blocked the loop"


@pytest.mark.single_node("a thread's way to the loop: no Redis difference")
async def test_a_sync_handler_reports_from_its_thread_and_an_async_one_cannot_block(
    env: Env,
) -> None:
    queue = env.queue
    job, other = make_job(), make_job()
    async with running_worker(queue.settings, sync_steps):
        await queue.enqueue(job)
        result = await eventually(lambda: queue.get_result(job["job_id"]))
    assert str(result.result).startswith(
        "progress: is not JSON-serialisable: Out of range float values are not JSON compliant"
    )
    assert await env.stored(job["job_id"]) == {"step": "sync"}
    async with running_worker(queue.settings, on_the_loop):
        await queue.enqueue(other)
        refused = await eventually(lambda: queue.get_result(other["job_id"]))
    assert "await report_progress" in str(refused.result)
    assert await queue.progress("dining", other["job_id"]) is None


@pytest.mark.single_node("the reporter's window: no Redis difference")
async def test_reports_within_the_interval_are_held_and_the_last_one_wins(env: Env) -> None:
    claim = await env.running()
    reporter = env.reporter(claim, interval=3600.0)  # the later reports fall in the window
    for step in range(1, 6):
        await reporter.report({"step": step})
    assert (reporter.stored, reporter.replaced) == (1, 3)
    assert await env.stored(claim.job_id) == {"step": 1}
    await reporter.flush()  # the handler returned: the one held is stored at once
    assert reporter.stored == 2
    assert await env.stored(claim.job_id) == {"step": 5}
    with pytest.raises(LeaseLost, match=ENDED):
        await reporter.report({"step": 6})


@pytest.mark.single_node("the reporter's window: no Redis difference")
async def test_the_report_held_is_stored_when_its_window_ends(env: Env) -> None:
    claim = await env.running()
    reporter = env.reporter(claim, interval=0.05)
    await reporter.report({"step": 1})
    await reporter.report({"step": 2})
    await reporter.report({"step": 3})
    await eventually(lambda: _equal(env.stored(claim.job_id), {"step": 3}))
    # Two writes: the first report at once, the last when the window ended; the second
    # was replaced unwritten. (A machine stalled past the window would store the second
    # at its end, then the third: stored 3, replaced 0, the last one still winning.)
    assert (reporter.stored, reporter.replaced) in ((2, 1), (3, 0))
    reporter.close()


async def _equal(value: Any, expected: Any) -> bool:
    return bool(await value == expected)


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


HOSTILE: list[Any] = [
    pytest.param([1, 2], "must be a JSON object (a dict), got list", id="a-list"),
    pytest.param("50%", "got str", id="a-string"),
    pytest.param(None, "got NoneType", id="none"),
    pytest.param({"at": object()}, "not JSON-serialisable", id="an-object"),
    pytest.param({"ids": {1, 2}}, "not JSON-serialisable", id="a-set"),
    pytest.param({"ratio": math.nan}, "Out of range float", id="nan"),
    pytest.param({"ratio": -math.inf}, "Out of range float", id="infinity"),
    pytest.param({"log": "x" * 1024}, "larger than 1024 bytes encoded", id="too-large"),
    pytest.param({"log": "é" * 200}, "over the limit of 1024", id="too-large-escaped"),
    pytest.param({1: "one", "1": "two"}, "must be a JSON object (string keys)", id="an-int-key"),
    pytest.param({"s": "\ud800"}, "surrogate", id="a-lone-surrogate"),
    pytest.param(nested(MAX_JSON_DEPTH + 1), f"deeper than {MAX_JSON_DEPTH}", id="too-deep"),
]


@pytest.mark.single_node("refused before anything is sent")
@pytest.mark.parametrize(("data", "problem"), HOSTILE)
async def test_hostile_reports_are_refused_naming_the_problem(
    env: Env, data: Any, problem: str
) -> None:
    claim = await env.running()
    reporter = env.reporter(claim)
    before = await env.snapshot()
    with pytest.raises(InvalidProgress, match=re.escape(problem)) as info:
        await reporter.report(data)
    assert info.value.field == "progress"
    assert changed_keys(before, await env.snapshot()) == set()
    assert reporter.stored == 0
    await reporter.report({"fine": True})  # a refusal does not end the reporting
    assert await env.stored(claim.job_id) == {"fine": True}


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 100_000])
def test_deep_nesting_is_refused_and_the_deepest_allowed_passes(depth: int) -> None:
    with pytest.raises(InvalidProgress, match=f"deeper than {MAX_JSON_DEPTH}"):
        encode_progress(nested(depth), 10**7)
    assert encode_progress(nested(MAX_JSON_DEPTH), 10**7).count("{") == MAX_JSON_DEPTH
    circular: dict[str, Any] = {}
    circular["self"] = circular
    with pytest.raises(InvalidProgress, match=f"deeper than {MAX_JSON_DEPTH}"):
        encode_progress(circular, 10**7)


async def test_the_script_refuses_what_is_not_one_small_json_object(env: Env) -> None:
    claim = await env.running()
    connection = env.queue.connection
    before = await env.snapshot()
    for report in ("[1, 2]", '"text"', '{"a": 1} trailing', "{", "x" * 1025, ""):
        with pytest.raises(InvalidProgress):
            await store_progress(connection, DINING, claim.job_id, TOKEN, report)
    assert changed_keys(before, await env.snapshot()) == set()


async def test_reports_without_the_lease_are_refused_and_write_nothing(env: Env) -> None:
    claim = await env.running()
    connection = env.queue.connection
    cases = {
        "unknown job": ("no-such-job", TOKEN, "job is missing"),
        "another token": (claim.job_id, "token-2", "job is running"),
    }
    before = await env.snapshot()
    for job_id, token, reason in cases.values():
        with pytest.raises(LeaseLost, match=reason):
            await store_progress(connection, DINING, job_id, token, '{"a": 1}')
    assert changed_keys(before, await env.snapshot()) == set()
    # A reporter whose lease was lost refuses every later report without asking Redis.
    lost = env.reporter(claim, token="token-2")
    with pytest.raises(LeaseLost):
        await lost.report({"a": 1})
    with pytest.raises(LeaseLost, match="job is running"):
        await lost.report({"a": 2})
    assert lost.stored == 0
    # After the completion (the token still on the record, the job succeeded).
    await env.leases.complete(claim.job_id, TOKEN, "1")
    before = await env.snapshot()
    with pytest.raises(LeaseLost, match="job is succeeded"):
        await store_progress(connection, DINING, claim.job_id, TOKEN, '{"late": 1}')
    assert changed_keys(before, await env.snapshot()) == set()


@pytest.mark.single_node("what the readers parse; a cluster's events: the first test")
async def test_stored_and_published_reports_that_do_not_parse(env: Env) -> None:
    """The readers' side: a stored report only the script writes, yet damaged, is
    refused by progress() naming the job key and skipped by the event stream (counted),
    as is a message on the channel that the script did not publish."""
    queue = env.queue
    claim = await env.running()
    await env.raw.hset(DINING.job(claim.job_id), mapping={"progress": "[1]", "progress_at": "5"})
    with pytest.raises(CorruptQueueState) as info:
        await queue.progress("dining", claim.job_id)
    assert info.value.key == DINING.job(claim.job_id)
    with pytest.raises(ValidationError, match="unknown agent type"):
        await queue.progress("no-such-type", claim.job_id)
    other = await env.running()
    async with queue.progress_events("dining", watch=[claim.job_id, other.job_id]) as events:
        await events.resync()  # (also subscribes and re-reads on the first anext)
        assert events.malformed == 1
        reporter = env.reporter(other, interval=0.0)
        await reporter.report({"ok": 1})
        got: Progress = await asyncio.wait_for(anext(events), 20)
        assert (got.job_id, got.data) == (other.job_id, {"ok": 1})
        for garbage in ("not json", '{"job_id": 1}', "[]"):
            await env.raw.execute_command("PUBLISH", DINING.progress_channel, garbage)
        await reporter.report({"ok": 2})
        got = await asyncio.wait_for(anext(events), 20)
        assert got.data == {"ok": 2}
        assert events.malformed >= 4  # (the resync's, plus the three messages)
        # Another report in the same millisecond is new; the same one read again is not.
        same_ms = str(round(got.at * 1000))
        await env.raw.hset(DINING.job(other.job_id), "progress", '{"ok": 3}')
        await events.resync()
        await events.resync()
        again = await asyncio.wait_for(anext(events), 20)
        assert (again.data, again.at) == ({"ok": 3}, got.at)
        assert await env.raw.hget(DINING.job(other.job_id), "progress_at") == same_ms
        await reporter.report({"ok": 4})  # next: this one, not the second re-read's {"ok": 3}
        assert (await asyncio.wait_for(anext(events), 20)).data == {"ok": 4}


async def test_an_outage_does_not_reach_the_handler_and_the_report_is_sent_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = RedisServer(appendonly=True).start()  # the claimed job survives the restart
    try:
        async with await JobQueue.connect(fast_settings(server.url)) as queue:
            job_id: str = await queue.enqueue(make_job())
            calls = AttemptCalls(queue.connection, "dining")
            await calls.take("worker-1", [TOKEN])
            reporter = ProgressReporter(queue.connection, DINING, job_id, TOKEN, interval=0.05)
            server.stop()
            with caplog.at_level(logging.WARNING, logger="platform_common.jobs.worker"):
                await reporter.report({"during": "the outage"})  # held, not raised
            assert reporter.stored == 0
            assert [r.getMessage() for r in caplog.records if "not stored" in r.getMessage()]
            server.start()

            async def stored() -> bool:
                progress = await queue.progress("dining", job_id)
                return progress is not None and progress.data == {"during": "the outage"}

            await eventually(stored)

            async def counted() -> bool:  # once its reply is in: a moment after the write
                return reporter.stored == 1

            await eventually(counted)
            reporter.close()
    finally:
        server.cleanup()
