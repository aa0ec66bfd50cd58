"""Backfill: dry run changes nothing, a real run makes listing complete, a re-run adds nothing."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from platform_common.jobs import RedisJobStore
from platform_common.jobs.cli import main
from platform_common.jobs.store.backfill import run, summary
from platform_common.jobs.store.contract import BaseJobStore
from tests.support.paths import REPO_ROOT
from tests.support.stores import Harness, harness_for

ROOT = REPO_ROOT


@pytest.fixture(params=["memory", "redis"])
async def harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    url = request.getfixturevalue("redis_url") if request.param == "redis" else None
    async for h in harness_for(request.param, url):
        yield h


async def index_size(harness: Harness, store: BaseJobStore) -> int:
    return sum([len(await harness.index(store, b)) for b in ("u1", "u2", "__shared__")])


async def test_dry_run_then_real_run_then_re_run(harness: Harness) -> None:
    store = harness.make(time_index=False)  # records written before the flag existed
    owners = ["u1", "u2", ""]
    for n in range(120):
        await store.create(f"old-{n:03d}", ttl_seconds=600, owner_oid=owners[n % 3])
        await harness.pass_time(0.0001)
    store.time_index = True
    await store.create("new-1", ttl_seconds=600, owner_oid="u1")  # indexed at create

    dry = await store.backfill_time_index(dry_run=True, batch=50)
    assert (dry.scanned, dry.added, dry.present, dry.skipped, dry.dry_run) == (121, 120, 1, 0, True)
    assert await index_size(harness, store) == 1

    seen: list[int] = []
    real = await store.backfill_time_index(batch=50, progress=seen.append)
    assert (real.scanned, real.added, real.present, real.skipped) == (121, 120, 1, 0)
    assert seen[-1] == 121 and seen == sorted(seen)
    assert await index_size(harness, store) == 121
    page = await store.list_for_owner("u1", limit=100)
    assert [r.job_id for r in page.rows][:3] == ["new-1", "old-119", "old-117"]
    assert len(page.rows) == 81 and page.next_cursor is None  # every u1 and shared job

    again = await store.backfill_time_index()
    assert (again.added, again.present) == (0, 121)
    assert await index_size(harness, store) == 121


async def test_backfill_while_traffic_continues(harness: Harness) -> None:
    store = harness.make(time_index=True)
    writer = harness.make(time_index=True)
    legacy = harness.make(time_index=False) if harness.kind == "redis" else store
    for n in range(300):
        await legacy.create(f"old-{n}", ttl_seconds=600, owner_oid="u1")
    created: list[str] = []

    async def traffic() -> None:
        for n in range(100):
            target = writer if harness.kind == "redis" else store
            await target.create(f"live-{n}", ttl_seconds=600, owner_oid="u1")
            created.append(f"live-{n}")
            if n % 10 == 0:
                await target.delete(f"live-{n}")
                created.remove(f"live-{n}")
            await asyncio.sleep(0)

    report, _ = await asyncio.gather(store.backfill_time_index(batch=20), traffic())
    assert report.added <= 300
    await store.backfill_time_index()  # a second run closes any gap
    ids = {m.split(":", 1)[1] for m in await harness.index(store, "u1")}
    assert ids == {f"old-{n}" for n in range(300)} | set(created)


async def test_malformed_records_are_skipped_and_reported(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    store = RedisJobStore(redis_url, agent="bf-agent")
    await store.create("good", ttl_seconds=60, owner_oid="u1")
    await redis_client.hset(store.keys.record("bad"), mapping={"status": "pending"})
    report = await store.backfill_time_index()
    assert (report.added, report.skipped, report.malformed) == (1, 1, ["bad"])
    await store.close()


async def test_run_reports_progress_with_the_total(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = RedisJobStore(redis_url, agent="run-agent")
    for n in range(9):
        await store.create(f"j{n}", ttl_seconds=600, owner_oid="u1")
    await store.close()
    monkeypatch.setenv("JOB_STORE_URL", redis_url)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "run-agent")
    seen: list[tuple[int, int | None]] = []

    report = await run(dry_run=True, batch=4, progress=lambda n, total: seen.append((n, total)))
    assert (report.scanned, report.added, report.dry_run) == (9, 9, True)
    assert seen[0] == (0, 9)  # before the first batch: a bar can show the total at once
    assert seen[-1] == (9, 9) and [n for n, _ in seen] == sorted(n for n, _ in seen)
    assert summary(report) == (
        "dry run (nothing written): scanned 9, would add 9, already present 0, skipped 0"
    )


def run_cli(
    redis_url: str, *args: str, module: str = "platform_common.jobs"
) -> subprocess.CompletedProcess[str]:
    """`python -m platform_common.jobs backfill ARGS` (`agentjobs backfill`)."""
    env = os.environ | {"JOB_STORE_URL": redis_url, "OTEL_SERVICE_NAME": "cli-agent"}
    command = [sys.executable, "-m", module, *(["backfill"] if module.endswith("jobs") else [])]
    return subprocess.run(
        [*command, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_the_former_command_line_names_the_command(redis_url: str) -> None:
    former = run_cli(redis_url, "--batch", "7", module="platform_common.jobs.store.backfill")
    assert (former.returncode, former.stdout) == (1, "")
    assert former.stderr.strip() == (
        "error: run `agentjobs backfill` (or `python -m platform_common.jobs backfill`)"
    )


async def test_the_command_line(redis_url: str) -> None:
    store = RedisJobStore(redis_url, agent="cli-agent")  # index off: entries missing
    for n in range(30):
        await store.create(f"j{n}", ttl_seconds=600, owner_oid="u1" if n % 2 else "")
    await store.close()
    indexed = RedisJobStore(redis_url, agent="cli-agent", time_index=True)

    dry = run_cli(redis_url, "--dry-run", "--batch", "7")
    assert dry.returncode == 0, dry.stderr
    assert "dry run (nothing written): scanned 30, would add 30, already present 0" in dry.stdout
    assert "backfill" in dry.stderr  # the progress lines
    assert (await indexed.record_count_hint() or 0) >= 30

    real = run_cli(redis_url, "--batch", "7")
    assert real.returncode == 0, real.stderr
    assert "scanned 30, added 30, already present 0, skipped 0" in real.stdout
    rerun = run_cli(redis_url, "--quiet")
    assert "scanned 30, added 0, already present 30, skipped 0" in rerun.stdout
    assert rerun.stderr == f"backfill target: {redis_url} agent 'cli-agent'\n"  # no progress
    assert len((await indexed.list_for_owner("u1", limit=100)).rows) == 30
    verified = run_cli(redis_url, "--verify", "--quiet")
    assert verified.returncode == 0, verified.stderr
    assert "verify (nothing written): scanned 30, missing 0, already present 30" in verified.stdout
    await indexed.close()


async def test_verify_exits_non_zero_while_a_record_lacks_its_entry(redis_url: str) -> None:
    store = RedisJobStore(redis_url, agent="cli-agent", index_writes=True)
    await store.create("indexed", ttl_seconds=600, owner_oid="u1")
    await store.close()
    unindexed = RedisJobStore(redis_url, agent="cli-agent")  # an agent still without writes
    await unindexed.create("unindexed", ttl_seconds=600, owner_oid="")
    await unindexed.close()

    missing = run_cli(redis_url, "--verify", "--quiet")
    assert missing.returncode == 1
    assert "scanned 2, missing 1, already present 1" in missing.stdout
    assert missing.stderr.splitlines()[-1].startswith("error: verify: 1 records lack their")
    assert run_cli(redis_url, "--quiet").returncode == 0
    assert run_cli(redis_url, "--verify", "--quiet").returncode == 0


def test_the_command_line_reports_configuration_errors(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JOB_STORE_URL", "nosql://x")
    assert main(["backfill", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: JOB_STORE_URL: ") and len(err.splitlines()) == 1, err
