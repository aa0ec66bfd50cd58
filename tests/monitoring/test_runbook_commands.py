"""Every command block of every runbook, run exactly as written against a live queue in
the state its alert describes.

A real redis-server holds the state (dead letters for DeadLetterDepthHigh, a backlog
and no worker for QueueNoActiveWorkers, an evicting policy for
QueueRedisEvictionPolicyUnsafe, ...), the real exporter reads it and a real Prometheus
scrapes the exporter; alerts about the exporter or the scrape get a Prometheus (and an
exporter) in their own state. Each `sh` block runs in bash with `set -e -o pipefail`,
with the variables the page's `env` blocks name pointing at those servers, and the Redis
state arranged afresh before any block that follows one that changed it (a requeue must
not empty the list the next purge reads).
It must exit 0 and print something, or fail the way the page says it will (the
exporter's own checks while it is down). `kubectl` blocks need a cluster: they are
checked to hold only kubectl commands, never run.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import httpx
import pytest
import redis
import yaml

from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobPayload, JobQueue
from platform_common.jobs_monitoring import outputs
from platform_common.jobs_monitoring.alerts.prometheus_rules import rule_file
from platform_common.jobs_monitoring.site import load_config
from platform_common.jobs_monitoring.spec import AlertSpec, alert_specs
from tests.support.fair_share_data import enqueue_keyed, plant_waits
from tests.support.prometheus import PrometheusServer
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import eventually, fast_settings, running_worker
from tests.support.redis_server import RedisServer, find_free_port
from tests.support.sync_redis import sync_reply
from tests.support.workers import wait_until

ROOT = Path(__file__).resolve().parents[2]
RUNBOOKS = ROOT / outputs.RUNBOOKS_DIR
SPECS = {spec.name: spec for spec in alert_specs(load_config())}
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)
EXPORTED = re.compile(r"^export ([A-Z_]+)=", re.MULTILINE)
RUN, FILL_IN, CLUSTER = "sh", "env", "kubectl"
AGENT_TYPE = "dining"
DINING = QueueKeys(AGENT_TYPE)
POISON = "poison pill"
OTHER_JOB = "orders-exporter"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not all(shutil.which(b) for b in ("prometheus", "promtool", "redis-cli", "curl")),
        reason="needs prometheus, promtool, redis-cli and curl",
    ),
]


def blocks(page: str) -> list[tuple[str, str]]:
    """(fence language, body) of every fenced block of a runbook page."""
    text = (RUNBOOKS / f"{page}.md").read_text(encoding="utf-8")
    return [(language, body) for language, body in FENCE.findall(text)]


# -- the servers ------------------------------------------------------------------


class Exporter:
    """`python -m platform_common.jobs_exporter` on a free port, as deployed."""

    def __init__(self, redis_url: str) -> None:
        self.port = find_free_port()
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 (closed in stop())
        self.process = subprocess.Popen(
            [sys.executable, "-m", "platform_common.jobs_exporter", "--redis-url", redis_url,
             "--host", "127.0.0.1", "--port", str(self.port), "--agent-types", AGENT_TYPE],
            cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        wait_until(self._alive, timeout=30)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _alive(self) -> bool:
        if self.process.poll() is not None:
            self.log.seek(0)
            raise AssertionError(f"exporter exited: {self.log.read().decode()}")
        try:
            return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=15)
        self.log.close()


@dataclass
class Site:
    """What the page's variables point at."""

    redis_url: str
    exporter_url: str
    prometheus: PrometheusServer
    rules: Path | None = None
    """The rule file its Prometheus evaluates (the generated rules), if any."""


def _scraping(
    stack: ExitStack,
    exporter_address: str,
    job_name: str = "queue-exporter",
    rules: Path | None = None,
) -> PrometheusServer:
    """A Prometheus that has scraped its one target at least once (up or down)."""
    rule_files = [] if rules is None else [rules]
    prometheus = stack.enter_context(
        PrometheusServer(targets=[exporter_address], job_name=job_name, rule_files=rule_files)
    )
    wait_until(lambda: any(t["health"] in ("up", "down") for t in prometheus.targets()), timeout=30)
    return prometheus


def _exporter(stack: ExitStack, redis_url: str) -> Exporter:
    exporter = Exporter(redis_url)
    stack.callback(exporter.stop)
    return exporter


def _site(stack: ExitStack, kind: str, redis_url: str, main: Site) -> Site:
    """The main site, or a Prometheus (and exporter) in an exporter alert's state."""
    if kind == "main":
        return main
    if kind == "exporter-down":  # the target exists and nothing answers on it
        dead = f"127.0.0.1:{find_free_port()}"
        return Site(redis_url, f"http://{dead}", _scraping(stack, dead))
    if kind == "not-scraped":  # the exporter runs, scraped under another job name
        address = main.exporter_url.removeprefix("http://")
        return Site(redis_url, main.exporter_url, _scraping(stack, address, OTHER_JOB))
    if kind == "exporter-cannot-read-redis":  # Redis is up for on-call, not for it
        exporter = _exporter(stack, f"redis://127.0.0.1:{find_free_port()}/0")
        return Site(redis_url, exporter.url, _scraping(stack, f"127.0.0.1:{exporter.port}"))
    if kind == "slo":
        # A Prometheus of its own, started before the state is arranged: a budget burn is
        # a ratio over hours, and in the shared one the other pages' jobs (successes
        # dilute failures and slow jobs) kept a burn page from firing, depending on which
        # pages an xdist worker ran before it.
        address = main.exporter_url.removeprefix("http://")
        return Site(redis_url, main.exporter_url, _scraping(stack, address, rules=main.rules))
    raise AssertionError(f"unknown site {kind}")


@pytest.fixture(scope="module")
def main_site(redis_server: RedisServer) -> Iterator[Site]:
    """The exporter and a Prometheus with the rule file (evaluated every second), shared by
    every page whose alert is about the queue: one start for the module, not one per page."""
    with ExitStack() as stack:
        exporter = _exporter(stack, redis_server.url)
        rules = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "rules.yml"
        rules.write_text(yaml.safe_dump(rule_file(load_config().test_settings(interval="1s"))))
        prometheus = _scraping(stack, f"127.0.0.1:{exporter.port}", rules=rules)
        yield Site(redis_server.url, exporter.url, prometheus, rules)


# -- the states the alerts describe -------------------------------------------------


async def _poison(job: JobPayload) -> None:
    raise RuntimeError(f"{POISON}: {job.task}")


async def _succeed(job: JobPayload) -> dict[str, str]:
    return {"ok": job.job_id}


async def _backlog(queue: JobQueue, count: int) -> None:
    await queue.enqueue_many([make_job(task=f"waiting {i}") for i in range(count)])


async def _run_through(
    queue: JobQueue, count: int, handler: Callable[..., Awaitable[object]]
) -> None:
    await queue.enqueue_many([make_job(task=f"run {i}") for i in range(count)])

    async def finished() -> bool:
        stats = await queue.stats(AGENT_TYPE)
        return stats.queued == 0 and stats.in_progress == 0 and stats.delayed == 0

    async with running_worker(queue.settings, handler):
        await eventually(finished)


async def backlog(queue: JobQueue, client: redis.Redis) -> None:
    await _backlog(queue, int(SPECS["QueueDepthHigh"].threshold) + 1)


async def dead_letters(queue: JobQueue, client: redis.Redis) -> None:
    await _run_through(queue, int(SPECS["DeadLetterDepthHigh"].threshold) + 1, _poison)


async def failing(queue: JobQueue, client: redis.Redis) -> None:
    await _run_through(queue, 2, _succeed)
    await _run_through(queue, 3, _poison)


async def slow(queue: JobQueue, client: redis.Redis) -> None:
    """Jobs that complete a minute after their enqueue, over the latency SLO's threshold:
    each handler moves its job's enqueue time back (a minute of waiting, without the wait)."""

    async def aged(job: JobPayload) -> dict[str, str]:
        client.hincrby(DINING.job(job.job_id), "enqueued_at", -60_000)
        return {"ok": job.job_id}

    await _run_through(queue, 3, aged)


async def idle(queue: JobQueue, client: redis.Redis) -> None:
    await _run_through(queue, 3, _succeed)  # traffic earlier, none now


async def memory_near_limit(queue: JobQueue, client: redis.Redis) -> None:
    await _backlog(queue, 5)
    used = int(sync_reply(client.info("memory"))["used_memory"])
    client.config_set("maxmemory", str(int(used / 0.9)))


async def evicting_policy(queue: JobQueue, client: redis.Redis) -> None:
    await _backlog(queue, 5)
    client.config_set("maxmemory-policy", "allkeys-lru")


async def paused(queue: JobQueue, client: redis.Redis) -> None:
    await _backlog(queue, 5)
    await queue.pause(AGENT_TYPE)


async def held_at_rate(queue: JobQueue, client: redis.Redis) -> None:
    await _backlog(queue, 5)
    await queue.set_limits(AGENT_TYPE, rate="1/m")
    client.hset(DINING.stats, "held_back_rate", "40")


async def fair_key_starving(queue: JobQueue, client: redis.Redis) -> None:
    """Fair share by tenant, one job per key at most, and three keys waiting: acme
    without a start for 20 minutes, the others for seconds."""
    await _backlog(queue, 5)
    await queue.set_limits(AGENT_TYPE, fair_by="tenant", max_running_per_key=1)
    await enqueue_keyed(queue, AGENT_TYPE, {"acme": 2, "globex": 1, "initech": 1})
    plant_waits(client, AGENT_TYPE, {"acme": 1_200_000, "globex": 5_000, "initech": 3_000})
    client.hset(DINING.stats, "held_back_max_running_per_key", "12")


async def malformed_counter(queue: JobQueue, client: redis.Redis) -> None:
    await _run_through(queue, 2, _succeed)
    client.hset(DINING.stats, "completed", "not-a-number")


Arrange = Callable[[JobQueue, redis.Redis], Awaitable[None]]


@dataclass(frozen=True)
class State:
    arrange: Arrange
    site: str = "main"
    shows: tuple[str, ...] = ()
    """Text the page's blocks print between them in this state."""
    fails: tuple[str, ...] = ()
    """Blocks naming one of these fail in this state, as the page says they will."""
    env: dict[str, str] = field(default_factory=dict)


STATES: dict[str, State] = {
    "QueueDepthHigh": State(backlog, shows=("No workers.",)),
    "QueueIdle": State(idle),
    "JobLatencyP95AboveSLO": State(idle),
    "DeadLetterDepthHigh": State(
        dead_letters,
        shows=(POISON, "Traceback", "would requeue", "requeued", "purged"),
        env={"ERROR_RE": POISON},
    ),
    "QueueExporterDown": State(
        backlog, site="exporter-down", shows=("healthz 000",), fails=("$EXPORTER_URL",)
    ),
    "QueueExporterAbsent": State(backlog, site="not-scraped", shows=(f'"job":"{OTHER_JOB}"',)),
    "QueueRedisUnreachable": State(
        backlog, site="exporter-cannot-read-redis", shows=('"redis":"unreachable"', "PONG")
    ),
    "QueueNoActiveWorkers": State(backlog, shows=("No workers.",)),
    "JobFailureRatioHigh": State(failing, shows=(POISON,)),
    "OldestJobOlderThanTTL": State(backlog, shows=("waiting",)),
    "QueueRedisEvictionPolicyUnsafe": State(evicting_policy, shows=("allkeys-lru",)),
    "QueueRedisMemoryHigh": State(memory_near_limit, shows=("maxmemory:",)),
    "JobsExpiring": State(backlog),
    "QueueExporterDroppingAgentTypes": State(backlog),
    "QueueExporterMalformedValues": State(malformed_counter),
    "JobAvailabilityBudgetBurnFast": State(
        failing, site="slo", shows=(POISON, 'window="5m"', "│ availability │")
    ),
    "JobAvailabilityBudgetBurnSlow": State(failing, site="slo", shows=(POISON, 'window="3d"')),
    "JobLatencyBudgetBurnFast": State(
        slow, site="slo", shows=('window="1h"', "No workers.", "│ latency      │")
    ),
    "JobLatencyBudgetBurnSlow": State(slow, site="slo", shows=('window="28d"',)),
    "QueuePausedTooLong": State(paused, shows=("for ", "dining: resumed (paused since")),
    "QueueHeldAtRateLimit": State(
        held_at_rate,
        shows=("  rate                 1/m", "40", "  rate                 200/s"),
        env={"NEW_RATE": "200/s"},
    ),
    "QueueFairKeyStarving": State(
        fair_key_starving,
        shows=("  max_running_per_key  1", "acme\t", "12", "  max_running_per_key  4"),
        env={"FAIR_KEY": "acme", "NEW_MAX_PER_KEY": "4"},
    ),
}


async def _arrange(redis_url: str, arrange: Arrange) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        client.flushall()
        client.config_set("maxmemory", "0")
        client.config_set("maxmemory-policy", "noeviction")
        async with await JobQueue.connect(fast_settings(redis_url, max_attempts=1)) as queue:
            await arrange(queue, client)
    finally:
        client.close()


def _fingerprint(redis_url: str) -> tuple[object, ...]:
    """The whole Redis state a block could change: every key's value and expiry time, and
    the memory settings (a page may set a policy). Equal before and after a block: the
    next block finds the state arranged, with no need to arrange it again."""
    client = redis.Redis.from_url(redis_url)
    try:
        keys = sorted(client.scan_iter(count=1000))
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.dump(key)
            pipe.execute_command("PEXPIRETIME", key)  # type: ignore[no-untyped-call]
        memory = sync_reply(client.config_get("maxmemory*"))
        return (*keys, *pipe.execute(), sorted(memory.items()))
    finally:
        client.close()


def _reset(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    try:
        client.config_set("maxmemory", "0")
        client.config_set("maxmemory-policy", "noeviction")
        client.flushall()
    finally:
        client.close()


# -- running a block as on-call would --------------------------------------------------


def _run(block: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    path = f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin"  # agentjobs: this venv's
    return subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", block],
        env={"PATH": path, "HOME": tempfile.gettempdir(), "COLUMNS": "200", **env},
        cwd=tempfile.gettempdir(), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def _variables(page: str, site: Site, state: State) -> dict[str, str]:
    known = {
        "AGENT_TYPE": AGENT_TYPE,
        "REDIS_URL": site.redis_url,
        "EXPORTER_URL": site.exporter_url,
        "PROMETHEUS_URL": site.prometheus.url,
        **state.env,
    }
    named = {
        n for language, body in blocks(page) if language == FILL_IN for n in EXPORTED.findall(body)
    }
    assert named <= set(known), f"{page}: no value for {named - set(known)}"
    return {name: known[name] for name in named}


PROMTOOL_QUERY = re.compile(r"""promtool query instant "\$PROMETHEUS_URL" '([^']+)'""")
SCRAPES_AND_EVALUATIONS = 2
"""Prometheus has the state in every series once it scraped it this often (a rate() needs
two samples of a counter that appeared with it) and then evaluated every rule group this
often (a recording that reads one of another group)."""


def _prometheus_time(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _has_settled(prometheus: PrometheusServer, since: float) -> Callable[[], bool]:
    """Whether Prometheus has scraped, since `since` (Unix seconds), SCRAPES_AND_EVALUATIONS
    times (its targets' scrapes are one second apart) and evaluated each rule group as
    often after that: from then on no query of the state's series changes its emptiness."""

    scraped: list[float] = []  # the first scrape that makes it SCRAPES_AND_EVALUATIONS

    def settled() -> bool:
        if not scraped:
            [target] = prometheus.targets()
            last = _prometheus_time(target["lastScrape"])
            if last <= since + SCRAPES_AND_EVALUATIONS - 1:
                return False
            scraped.append(last)
        return all(
            _prometheus_time(group["lastEvaluation"]) > scraped[0] + SCRAPES_AND_EVALUATIONS - 1
            for group in prometheus.rules()
        )

    return settled


def _wait_for_alert_query(spec: AlertSpec, site: Site, runnable: list[str], since: float) -> None:
    """Prometheus has scraped the state arranged at `since`: the alert's own query returns
    series, and so does each query the page runs, given the time (a rate() needs two
    scrapes of a counter that appeared with the state). One that stays empty once
    Prometheus has settled (_has_settled) is left to the block's own assertion, which
    reports it: waiting longer could not fill it."""
    prometheus = site.prometheus
    prometheus.wait_for(spec.query, timeout=30)
    settled = _has_settled(prometheus, since)
    for expr in (expr for block in runnable for expr in PROMTOOL_QUERY.findall(block)):

        def filled_or_settled(expr: str = expr) -> bool:
            return bool(prometheus.query(expr)) or settled()

        wait_until(filled_or_settled, timeout=30, interval=0.1)


@pytest.mark.parametrize("page", sorted(SPECS))
def test_every_block_runs_as_written_in_the_alerts_state(page: str, main_site: Site) -> None:
    assert page in STATES, f"{page}: add the state its alert describes to STATES"
    state = STATES[page]
    page_blocks = blocks(page)
    assert {language for language, _ in page_blocks} <= {RUN, FILL_IN, CLUSTER, "promql"}
    runnable = [body for language, body in page_blocks if language == RUN]
    assert runnable, f"{page} has no command to run"
    with ExitStack() as stack:
        stack.callback(_reset, main_site.redis_url)
        site = _site(stack, state.site, main_site.redis_url, main_site)
        asyncio.run(_arrange(site.redis_url, state.arrange))
        arranged = time.time()
        if state.site != "exporter-down":
            _wait_for_alert_query(SPECS[page], site, runnable, arranged)
        env = _variables(page, site, state)
        printed = []
        arranged_state = _fingerprint(site.redis_url)
        for block in runnable:
            if _fingerprint(site.redis_url) != arranged_state:  # the block before changed it
                asyncio.run(_arrange(site.redis_url, state.arrange))
                arranged_state = _fingerprint(site.redis_url)
            done = _run(block, env)
            report = f"{page}:\n{block}\nexit {done.returncode}\n{done.stdout}{done.stderr}"
            if any(marker in block for marker in state.fails):
                assert done.returncode != 0 and "Failed to connect" in done.stderr, report
            else:
                assert done.returncode == 0, report
                assert done.stdout.strip(), report
                assert "Traceback" not in done.stderr, report
            printed.append(done.stdout + done.stderr)
        for text in state.shows:
            assert text in "".join(printed), f"{page}: nothing printed {text!r}"


def test_blocks_that_are_not_run_hold_only_cluster_commands_and_values() -> None:
    for page in SPECS:
        for language, body in blocks(page):
            lines = [line for line in body.splitlines() if line.strip()]
            if language == CLUSTER:
                assert all(line.startswith("kubectl ") for line in lines), (page, body)
            if language == FILL_IN:
                assert all(EXPORTED.match(line) for line in lines), (page, body)


def test_no_python_heredocs_and_every_page_says_where_to_run() -> None:
    for page in SPECS:
        text = (RUNBOOKS / f"{page}.md").read_text(encoding="utf-8")
        assert "python - <<" not in text and "import " not in text, page
        assert "pip install 'platform-common-jobs[cli]'" in text, page
        assert "kubectl exec -it deploy/<worker-deployment> -- agentjobs" in text, page
