"""The operator CLI as operators run it: `python -m platform_common.jobs <command>` (and the
old module names as aliases) in child processes, against a real redis-server."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from platform_common.jobs import RedisJobStore, acl
from platform_common.jobs.keys import StoreKeys
from platform_common.jobs.queue import JobQueue, JobResult
from tests.cli.conftest import DINING_WORKER_PASSWORD, WRONG_PASSWORD
from tests.cli.runner import DEAD_REDIS, ROOT, child_env, one_error_line, one_line_failure, run
from tests.support.queue_handlers import make_job
from tests.support.redis_server import RedisServer
from tests.support.workers import wait_until

COMMANDS = ("worker", "backfill", "acl")
ECHO = "platform_common.jobs.queue.builtin:echo"
NO_SUCH_HANDLER = "tests.support.queue_handlers:no_such_function"


def without(modules: tuple[str, ...], *args: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI in a process where importing `modules` fails (an extra not installed)."""
    code = (
        "import sys\n"
        f"sys.modules.update(dict.fromkeys({modules!r}))\n"
        "from platform_common.jobs.cli import main\n"
        f"sys.exit(main({list(args)!r}))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip


# -- the app ----------------------------------------------------------------------------
def test_help_lists_every_command() -> None:
    done = run("--help")
    assert done.returncode == 0, done.stderr
    for command in COMMANDS:
        assert command in done.stdout


def test_help_shows_flags_without_a_value() -> None:
    root = run("--help", env={"COLUMNS": "120"})
    info = run("info", "--help", env={"COLUMNS": "120"})
    assert root.returncode == info.returncode == 0, root.stderr + info.stderr
    assert "--debug" in root.stdout and "--watch" in info.stdout
    assert "<bool>" not in root.stdout + info.stdout
    assert "<float range>" in info.stdout  # an option that takes a value still says which


def test_the_console_script_is_installed() -> None:
    script = Path(sys.executable).parent / "agentjobs"
    done = subprocess.run(
        [str(script), "--help"], env=child_env(), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "Usage: agentjobs" in done.stdout


def test_usage_errors_exit_2() -> None:
    assert run().returncode == 2  # no command: the help, as a usage error
    assert run("no-such-command").returncode == 2
    assert run("backfill", "--no-such-option").returncode == 2


# -- worker -----------------------------------------------------------------------------
def test_worker_with_a_bad_handler_exits_2_naming_it() -> None:
    done = run(
        "worker", "--agent-type", "dining", "--handler", NO_SUCH_HANDLER,
        env={"QUEUE_REDIS_URL": DEAD_REDIS},
    )  # fmt: skip
    assert done.returncode == 2
    assert one_error_line(done) == (
        "error: --handler: 'tests.support.queue_handlers' has no 'no_such_function'"
    )


@pytest.mark.parametrize(
    ("args", "env", "named"),
    [
        (["--handler", "no-colon"], {}, "--handler"),
        (["--handler", ECHO, "--log-level", "LOUD"], {}, "--log-level"),
        (["--handler", ECHO, "--agent-type", "nobody"], {}, "agent_type"),
        (["--handler", ECHO], {"QUEUE_NO_SUCH_SETTING": "1"}, "QUEUE_NO_SUCH_SETTING"),
        (["--handler", ECHO, "--redis-url", "nosql://x"], {}, "--redis-url"),
    ],
)
def test_worker_configuration_errors_exit_2_in_one_line(
    args: list[str], env: dict[str, str], named: str
) -> None:
    done = run(
        "worker", "--agent-type", "dining", *args, env={"QUEUE_REDIS_URL": DEAD_REDIS, **env}
    )
    assert done.returncode == 2
    assert named in one_error_line(done)


def test_unreachable_redis_is_one_line_and_exit_1_unless_debugging() -> None:
    args = ("worker", "--agent-type", "dining", "--handler", ECHO, "--redis-url", DEAD_REDIS)
    done = run(*args)
    assert done.returncode == 1
    assert one_error_line(done).startswith("error: Redis: ConnectionError:")
    for debugging in (run(*args, "--debug"), run(*args, env={"AGENTJOBS_DEBUG": "1"})):
        assert debugging.returncode == 1
        assert "Traceback" in debugging.stderr
        assert debugging.stderr.rstrip().splitlines()[-1].startswith("error: Redis:")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"AGENTJOBS_DEBGU": "1"}, "AGENTJOBS_DEBGU: unknown AGENTJOBS_* variable; did you "
         "mean AGENTJOBS_DEBUG?"),
        ({"AGENTJOBS_DEBUG": "maybe"}, "AGENTJOBS_DEBUG: must be true/false"),
    ],
    ids=["misspelt", "not-a-boolean"],
)  # fmt: skip
@pytest.mark.parametrize("command", [("acl",), ("worker", "--agent-type", "dining")])
def test_the_clis_own_namespace_is_strict(
    env: dict[str, str], message: str, command: tuple[str, ...]
) -> None:
    # The worker would fail on its missing --handler: the environment is checked first.
    done = run(*command, env=env)
    assert done.returncode == 2
    assert one_error_line(done).startswith(f"error: {message}")
    assert run("acl", "--role", "exporter", env={"AGENTJOBS_DEBUG": "off"}).returncode == 0


REFUSALS = ("dead-port", "wrong-password", "tls-unverified")


def refusal_url(refusal: str, refusing: RedisServer, tls: RedisServer) -> tuple[str, str]:
    """(URL, the secret the report must not show) of a Redis a client cannot use."""
    return {
        # Nothing listens; a password in the URL must not show up in the report either.
        "dead-port": (DEAD_REDIS.replace("//", f"//:{WRONG_PASSWORD}@"), WRONG_PASSWORD),
        "wrong-password": (refusing.url_for("admin", WRONG_PASSWORD), WRONG_PASSWORD),
        # A TLS-only server whose certificate the client cannot verify (no CA given).
        "tls-unverified": (tls.url.partition("?")[0], "ssl_ca_certs"),
    }[refusal]


@pytest.mark.parametrize("refusal", REFUSALS)
def test_worker_reports_a_refusing_redis_in_one_line(
    refusing_redis: RedisServer, tls_redis: RedisServer, refusal: str
) -> None:
    url, secret = refusal_url(refusal, refusing_redis, tls_redis)
    done = run("worker", "--agent-type", "dining", "--handler", ECHO, "--redis-url", url)
    assert done.returncode == 1
    line = one_line_failure(done, host=_host(url), password=secret)
    assert line.startswith("error: Redis: ")


def test_worker_without_rights_on_its_type_names_the_refusal(refusing_redis: RedisServer) -> None:
    # The CLI-scoped dining worker started on flights: Redis answers NOPERM at once.
    url = refusing_redis.url_for("dining-worker", DINING_WORKER_PASSWORD)
    done = run("worker", "--agent-type", "flights", "--handler", ECHO, "--redis-url", url)
    assert done.returncode == 1
    line = one_error_line(done)
    assert line.startswith("error: Redis: NoPermissionError: redis://dining-worker:***@")
    assert _host(url) in line and "refused the worker" in line
    assert DINING_WORKER_PASSWORD not in done.stderr


def _host(url: str) -> str:
    """`127.0.0.1:<port>` of a redis:// or rediss:// URL."""
    return url.split("//", 1)[1].rpartition("@")[2].partition("/")[0]


async def enqueue_and_wait(redis_url: str, job: dict[str, Any]) -> JobResult | None:
    async with await JobQueue.connect(redis_url) as queue:
        await queue.enqueue(job)
        async with queue.completions(watch=[("dining", job["job_id"])]) as events:
            done = await asyncio.wait_for(anext(events), timeout=30)
    return done.result


@pytest.mark.single_node("worker and backfill commands against a cluster: tests/queue, tests/store")
def test_worker_runs_jobs_and_stops_on_sigterm(redis_url: str, tmp_path: Path) -> None:
    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "platform_common.jobs", "worker", "--agent-type", "dining",
             "--handler", ECHO, "--concurrency", "2"],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
            env=child_env({"QUEUE_REDIS_URL": redis_url, "QUEUE_BLOCK_TIMEOUT": "0.2"}),
        )  # fmt: skip
    try:
        wait_until(lambda: "worker ready" in log_path.read_text() or worker.poll() is not None)
        assert worker.poll() is None, log_path.read_text()
        job = make_job(task="through the new entry point")
        result = asyncio.run(enqueue_and_wait(redis_url, job))
    finally:
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(timeout=30)
    assert code == 0, log_path.read_text()  # a graceful stop is a success
    assert "worker stopped" in log_path.read_text()
    assert result is not None and result.ok
    assert result.result == {"task": job["task"], "constraints": job["constraints"]}


HANDLER_MODULE = """\
from typing import Any


async def greet(job: Any) -> dict[str, str]:
    return {"from": "the working directory", "task": job.task}
"""


@pytest.mark.single_node("worker and backfill commands against a cluster: tests/queue, tests/store")
@pytest.mark.parametrize("entry", ["console script", "python -m"])
def test_worker_imports_a_handler_from_the_working_directory(
    entry: str, redis_url: str, tmp_path: Path
) -> None:
    """`agentjobs worker` finds a handler module beside the operator, as `python -m` does."""
    (tmp_path / "newcomer_handlers.py").write_text(HANDLER_MODULE)
    command = (
        [str(Path(sys.executable).parent / "agentjobs")]
        if entry == "console script"
        else [sys.executable, "-m", "platform_common.jobs"]
    )
    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log:
        worker = subprocess.Popen(
            [*command, "worker", "--agent-type", "dining",
             "--handler", "newcomer_handlers:greet"],
            cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
            env=child_env({"QUEUE_REDIS_URL": redis_url, "QUEUE_BLOCK_TIMEOUT": "0.2"}),
        )  # fmt: skip
    try:
        wait_until(lambda: "worker ready" in log_path.read_text() or worker.poll() is not None)
        assert worker.poll() is None, log_path.read_text()
        job = make_job(task="from a module in the working directory")
        result = asyncio.run(enqueue_and_wait(redis_url, job))
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
    assert result is not None and result.ok, log_path.read_text()
    assert result.result == {"from": "the working directory", "task": job["task"]}


def test_worker_alias_keeps_working() -> None:
    done = run("--help", module="platform_common.jobs.worker")
    assert done.returncode == 0, done.stderr
    assert "--agent-type" in done.stdout and "--handler" in done.stdout
    bad = run(
        "--agent-type", "dining", "--handler", NO_SUCH_HANDLER,
        env={"QUEUE_REDIS_URL": DEAD_REDIS}, module="platform_common.jobs.worker",
    )  # fmt: skip
    assert bad.returncode == 2
    assert "no_such_function" in one_error_line(bad)


def test_worker_needs_only_the_core_install() -> None:
    help_text = without(("typer", "rich"), "worker", "--help")
    assert help_text.returncode == 0, help_text.stderr
    assert "--agent-type" in help_text.stdout
    bad = without(("typer", "rich"), "worker", "--agent-type", "dining", "--handler", "x:y")
    assert bad.returncode == 2
    assert "--handler" in one_error_line(bad)


def test_other_commands_name_the_missing_cli_extra() -> None:
    done = without(("typer",), "acl")
    assert done.returncode == 2
    assert one_error_line(done) == (
        "error: `acl` needs the 'cli' extra (no module 'typer'): "
        "pip install 'platform-common-jobs[cli]'"
    )


# -- backfill ---------------------------------------------------------------------------
@pytest.mark.single_node("worker and backfill commands against a cluster: tests/queue, tests/store")
async def test_backfill_dry_run_counts_and_writes_nothing(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    store = RedisJobStore(redis_url, agent="cli-agent")  # index off: no entries written
    for n in range(12):
        await store.create(f"j{n}", ttl_seconds=600, owner_oid="u1")
    await store.close()
    env = {"JOB_STORE_URL": redis_url, "OTEL_SERVICE_NAME": "cli-agent"}

    done = run("backfill", "--dry-run", "--batch", "5", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "dry run (nothing written): scanned 12, would add 12, already present 0, skipped 0\n"
    )
    # Progress lines (stderr is no terminal here); the total is DBSIZE, an upper bound.
    assert re.search(r"^backfill: 12 / ~\d+ records$", done.stderr, re.M), done.stderr
    assert await redis_client.zcard(StoreKeys("cli-agent").index("u1")) == 0


@pytest.mark.single_node("worker and backfill commands against a cluster: tests/queue, tests/store")
async def test_backfill_reports_in_json_for_scripts(redis_url: str) -> None:
    store = RedisJobStore(redis_url, agent="cli-json-agent")  # index off: entries missing
    for n in range(3):
        await store.create(f"j{n}", ttl_seconds=600, owner_oid="u1")
    await store.close()
    env = {"JOB_STORE_URL": redis_url, "OTEL_SERVICE_NAME": "cli-json-agent"}
    done = run("backfill", "--dry-run", "--quiet", "--output", "json", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "scanned": 3, "added": 3, "present": 0, "skipped": 0, "dry_run": True,
        "malformed": [], "bad_buckets": [],
    }  # fmt: skip


@pytest.mark.single_node("worker and backfill commands against a cluster: tests/queue, tests/store")
async def test_backfill_verify_fails_until_every_record_has_its_entry(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    env = {"JOB_STORE_URL": redis_url, "OTEL_SERVICE_NAME": "cli-verify-agent"}
    before = RedisJobStore(redis_url, agent="cli-verify-agent")  # from before the index
    for n in range(4):
        await before.create(f"old-{n}", ttl_seconds=600, owner_oid="u1")
    await before.close()
    writer = RedisJobStore(redis_url, agent="cli-verify-agent", index_writes=True)
    await writer.create("new-0", ttl_seconds=600, owner_oid="u1")  # indexed at create
    await writer.close()
    index = StoreKeys("cli-verify-agent").index("u1")

    early = run("backfill", "--verify", "--quiet", env=env)
    assert early.returncode == 1, early.stderr
    assert early.stdout == (
        "verify (nothing written): scanned 5, missing 4, already present 1, skipped 0\n"
    )
    assert one_error_line(early) == (
        "error: verify: 4 records lack their index entry: keep index reads off; with index "
        "writes on everywhere, run the backfill and verify again"
    )
    assert await redis_client.zcard(index) == 1  # verify wrote nothing

    assert run("backfill", "--quiet", env=env).returncode == 0
    done = run("backfill", "--verify", "--quiet", "--output", "json", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["added"] == 0 and await redis_client.zcard(index) == 5


@pytest.mark.single_node("worker and backfill commands against a cluster: tests/queue, tests/store")
async def test_backfill_names_its_target_first(redis_url: str) -> None:
    env = {"JOB_STORE_URL": redis_url, "OTEL_SERVICE_NAME": "cli-agent"}
    done = run("backfill", "--dry-run", "--quiet", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[0] == f"backfill target: {redis_url} agent 'cli-agent'"


def test_backfill_refuses_an_in_memory_store() -> None:
    for env in ({"JOB_STORE_URL": "memory://"}, {"JOB_STORE_URL": ""}):
        refused = run("backfill", "--quiet", env=env)
        assert refused.returncode == 2
        assert one_error_line(refused).startswith("error: JOB_STORE_URL: backfill needs a Redis")


@pytest.mark.parametrize("refusal", REFUSALS)
def test_backfill_reports_a_refusing_redis_in_one_line(
    refusing_redis: RedisServer, tls_redis: RedisServer, refusal: str
) -> None:
    url, secret = refusal_url(refusal, refusing_redis, tls_redis)
    env = {"JOB_STORE_URL": url, "OTEL_SERVICE_NAME": "cli-agent"}
    done = run("backfill", "--quiet", env=env)
    assert done.returncode == 1
    # Its target first (redacted), then the one line of the failure.
    assert done.stderr.startswith("backfill target: redis"), done.stderr
    line = one_line_failure(done, host=_host(url), password=secret, after="backfill target: ")
    assert line.startswith("error: backend unavailable: ")


def test_backfill_failures_are_one_line() -> None:
    unreachable = run("backfill", "--quiet", env={"JOB_STORE_URL": DEAD_REDIS})
    assert unreachable.returncode == 1
    assert one_error_line(unreachable).startswith("error: backend unavailable: ")
    misconfigured = run("backfill", env={"JOB_STORE_URL": "nosql://x"})
    assert misconfigured.returncode == 2
    assert one_error_line(misconfigured).startswith("error: JOB_STORE_URL: ")


# -- acl --------------------------------------------------------------------------------
def test_acl_prints_the_rules_of_every_role() -> None:
    done = run("acl")
    assert done.returncode == 0, done.stderr
    assert done.stdout == acl.markdown()
    for role in ("producer", "worker", "exporter"):
        assert f"ACL SETUSER {role} reset on" in done.stdout
    # The former alias names the command and fails (it must not import the CLI back).
    former = run(module="platform_common.jobs.acl")
    assert (former.returncode, former.stdout) == (1, "")
    assert "agentjobs acl" in one_error_line(former)


def test_acl_for_one_role_and_other_prefixes() -> None:
    done = run("acl", "--role", "worker", "--queue-prefix", "q", "--store-prefix", "s")
    assert done.returncode == 0, done.stderr
    assert done.stdout == " ".join(acl.rules("worker", queue_prefix="q", store_prefix="s")) + "\n"
    unknown = run("acl", "--role", "admin")
    assert unknown.returncode == 2
    # A usage error is typer's (a box, wrapped to the terminal): the roles are listed.
    assert "producer, worker, exporter" in " ".join(unknown.stderr.replace("│", " ").split())
