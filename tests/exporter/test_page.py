"""The /metrics page written straight from a scrape (page.py) is byte for byte what
prometheus_client's encoders write for metric_families, for every Accept header the
exporter answers, and the one-round-trip wire read behaves as redis-py's pipeline."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Iterator

import pytest
import redis
import redis.asyncio as aioredis
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.exposition import choose_encoder
from redis.exceptions import ResponseError

from platform_common.jobs.keys import QueueKeys, latency_bucket_field
from platform_common.jobs.redis.memory_policy import MemoryInfo
from platform_common.jobs_exporter.collector import ScrapeResult, metric_families, registry_for
from platform_common.jobs_exporter.page import PageMemory, page_format, render_page
from platform_common.jobs_exporter.reader import make_exporter_client
from platform_common.jobs_exporter.server_stats import ServerStats
from platform_common.jobs_exporter.service import Exporter
from platform_common.jobs_exporter.settings import ExporterSettings
from platform_common.jobs_exporter.snapshot import (
    LatencyHistogram,
    Snapshot,
    TypeSnapshot,
    WorkerBeat,
)
from platform_common.jobs_exporter.stats_hash import BucketExemplar
from platform_common.jobs_exporter.wire import pack, send_and_read
from tests.support.exporter_data import of, parse, seed_type
from tests.support.sync_redis import sync_reply

PROMETHEUS_2 = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
    "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
PROMETHEUS_3 = (
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,"
    "application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;"
    "escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1"
)
# (Accept, whether page.py writes the answer itself): the ones it does not go through
# prometheus_client, and must come out the same all the same.
ACCEPTS = [
    (None, True),
    ("", True),
    ("*/*", True),
    ("text/plain", True),
    ("text/plain;version=0.0.4", True),
    ("text/plain;version=1.0.0;escaping=allow-utf-8", True),
    ("text/plain;version=1.0.0;escaping=underscores", True),
    ("text/plain;version=1.0.0;escaping=values", True),
    ("text/plain;version=1.0.0;escaping=dots", False),
    ("application/openmetrics-text", True),
    ("application/openmetrics-text;version=1.0.0", True),
    ("application/openmetrics-text;version=1.0.0;escaping=dots", False),
    ("application/openmetrics-text;version=2.0.0", False),
    (PROMETHEUS_2, True),
    (PROMETHEUS_3, True),
]

LATENCY = LatencyHistogram(
    ((0.5, 5), (2.5, 8), (math.inf, 9)),
    12.25,
    # OpenMetrics writes them on their buckets' lines; the text format has none.
    (
        (0.5, BucketExemplar("4bf92f3577b34da6a3ce929d0e0e4736", 0.25, 1_700_000_099.123)),
        (math.inf, BucketExemplar("a" * 32, 30.5, 1_700_000_100.0)),
    ),
)
DINING = TypeSnapshot(
    agent_type="dining",
    queue_depth=7,
    in_progress=2,
    delayed_depth=3,
    dead_letter_depth=4,
    counters={
        "enqueued": 20,
        "started": 16,
        "completed": 9,
        "failed": 4,
        "retried": 3,
        "dead_lettered": 4,
        "expired": 1,
    },
    latency=LATENCY,
    wait=LatencyHistogram(((0.5, 7), (2.5, 9), (math.inf, 9)), 3.5),
    run=LatencyHistogram(((1e-05, 1), (12345678.0, 2), (math.inf, 2_000_000)), 1e9),
    error_classes={"TimeoutError": 5, 'odd.Error"x\\y\nz': 1, "other": 1},
    oldest_age_seconds=42.5,
    active_workers=2,
    last_heartbeat_seconds=1_700_000_000.25,
    workers=(WorkerBeat('host "b"\\7\n', 61.5), WorkerBeat("host-a:3", 0.25)),
)
EDGES = TypeSnapshot(
    agent_type="we.ird-type_1",
    queue_depth=999_999,
    in_progress=1_000_000,
    delayed_depth=-5,
    dead_letter_depth=10**12,
    counters={"enqueued": 0, "started": 10**15},
    latency=LatencyHistogram(((-1.0, 0), (math.inf, 3)), 0.0),  # no count or sum lines
    wait=None,
    run=LatencyHistogram(((math.inf, 0),), 0.0),
    oldest_age_seconds=None,  # unknown: no sample
    active_workers=0,
    last_heartbeat_seconds=math.inf,  # not finite: no sample
    workers=(WorkerBeat("w", math.inf),),
)
MEMORY = {
    "10.0.0.1:6379": MemoryInfo(used_bytes=1_500_000, max_bytes=2_000_000, policy="noeviction"),
    "10.0.0.2:6379": MemoryInfo(used_bytes=900_000, max_bytes=0, policy="allkeys-lru"),
}
SERVER = {
    "10.0.0.1:6379": ServerStats(connected_clients=12, blocked_clients=4, evicted_keys=0),
    "10.0.0.2:6379": ServerStats(connected_clients=3, blocked_clients=0, evicted_keys=17),
}
RESULTS = {
    "full": ScrapeResult(
        Snapshot((DINING, EDGES), types_dropped=3, memory=MEMORY, server=SERVER), 0.004, 5
    ),
    "redis down": ScrapeResult(None, 2.0, malformed_total=5),
    "no INFO": ScrapeResult(Snapshot((DINING,), memory_problem="NOPERM"), 0.0),
    "no types": ScrapeResult(Snapshot(()), 1e-7),
}


def reference(result: ScrapeResult, namespace: str, accept: str | None) -> tuple[bytes, str]:
    """What prometheus_client writes for `accept`: the exporter's page before page.py."""
    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry_for(metric_families(result, namespace))), content_type


@pytest.fixture(scope="module")
def exporters() -> Iterator[dict[str, Exporter]]:
    # render() never touches Redis: an address nothing listens on is fine.
    url = "redis://127.0.0.1:9/0"
    yield {
        namespace: Exporter(ExporterSettings.from_args(["--redis-url", url, *flag]))
        for namespace, flag in (("", []), ("acme", ["--namespace", "acme"]))
    }


@pytest.mark.parametrize("namespace", ["", "acme"])
@pytest.mark.parametrize("case", list(RESULTS))
@pytest.mark.parametrize(("accept", "written_here"), ACCEPTS)
def test_page_is_byte_identical_to_prometheus_client(
    exporters: dict[str, Exporter],
    namespace: str,
    case: str,
    accept: str | None,
    written_here: bool,
) -> None:
    result = RESULTS[case]
    expected, content_type = reference(result, namespace, accept)
    assert exporters[namespace].render(result, accept) == (expected, content_type)
    # Not vacuous: the usual formats are page.py's own, not prometheus_client's.
    openmetrics = page_format(content_type)
    assert (openmetrics is not None) == written_here
    if openmetrics is not None:
        assert render_page(result, namespace, openmetrics) == expected


def test_exemplars_are_on_the_openmetrics_page_only_whatever_was_rendered_before() -> None:
    result = RESULTS["full"]
    memory = PageMemory()
    openmetrics = render_page(result, "", True, memory)
    assert b'# {trace_id="4bf92f3577b34da6a3ce929d0e0e4736"} 0.25 1700000099.123\n' in openmetrics
    # The same memory (kept lines) for a text page next: no exemplar leaks into it.
    text = render_page(result, "", False, memory)
    assert b"trace_id" not in text and text == reference(result, "", None)[0]
    assert render_page(result, "", True, memory) == openmetrics


LABEL_TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
NUMBER = st.one_of(st.integers(-(10**20), 10**20), st.floats(allow_nan=True, allow_infinity=True))
COUNT = st.one_of(st.integers(0, 10**20), st.floats(allow_nan=False, allow_infinity=True))


@st.composite
def histograms(draw: st.DrawFn) -> LatencyHistogram | None:
    bounds = draw(st.lists(st.floats(-10, 1e12, allow_nan=False), max_size=5, unique=True))
    counts = draw(st.lists(COUNT, min_size=len(bounds) + 1, max_size=len(bounds) + 1))
    buckets = tuple(zip([*sorted(bounds), math.inf], counts, strict=True))
    exemplars = tuple((bound, draw(exemplar_of())) for bound, _ in buckets if draw(st.booleans()))
    # Counts that are floats, or not ascending, are no parse's output: the page must be
    # the same all the same.
    histogram = LatencyHistogram(buckets, draw(NUMBER), exemplars)  # type: ignore[arg-type]
    return draw(st.none() | st.just(histogram))


@st.composite
def exemplar_of(draw: st.DrawFn) -> BucketExemplar:
    return BucketExemplar(
        draw(st.from_regex(r"[0-9a-f]{32}", fullmatch=True)),
        draw(st.floats(0, 1e12, allow_nan=False)),
        draw(st.integers(0, 10**15)) / 1000,
    )


@st.composite
def type_snapshots(draw: st.DrawFn) -> TypeSnapshot:
    return TypeSnapshot(
        agent_type=draw(st.from_regex(r"[a-z0-9][a-z0-9._-]{0,10}", fullmatch=True)),
        queue_depth=draw(NUMBER),  # type: ignore[arg-type]
        in_progress=draw(NUMBER),  # type: ignore[arg-type]
        delayed_depth=draw(NUMBER),  # type: ignore[arg-type]
        dead_letter_depth=draw(NUMBER),  # type: ignore[arg-type]
        counters=draw(
            st.dictionaries(
                st.sampled_from(["enqueued", "failed", "expired"]), st.integers(0, 10**20)
            )
        ),
        latency=draw(histograms()),
        wait=draw(histograms()),
        run=draw(histograms()),
        error_classes=draw(st.dictionaries(LABEL_TEXT, st.integers(0, 10**9), max_size=3)),
        oldest_age_seconds=draw(st.none() | NUMBER),
        active_workers=draw(st.integers(0, 10**7)),
        last_heartbeat_seconds=draw(st.none() | NUMBER),
        workers=tuple(draw(st.lists(st.builds(WorkerBeat, LABEL_TEXT, NUMBER), max_size=3))),
    )


@settings(max_examples=150, deadline=None)
@given(
    types=st.lists(type_snapshots(), max_size=3),
    nodes=st.dictionaries(LABEL_TEXT, st.integers(0, 10**13), max_size=2),
    duration=NUMBER,
    openmetrics=st.booleans(),
)
def test_any_snapshot_renders_as_prometheus_client_does(
    types: list[TypeSnapshot], nodes: dict[str, int], duration: float, openmetrics: bool
) -> None:
    memory = {node: MemoryInfo(size, size // 2, "volatile-lru") for node, size in nodes.items()}
    server = {node: ServerStats(size, size // 3, size // 5) for node, size in nodes.items()}
    result = ScrapeResult(Snapshot(tuple(types), memory=memory, server=server), duration, 1)
    accept = "application/openmetrics-text;version=1.0.0" if openmetrics else None
    assert render_page(result, "", openmetrics) == reference(result, "", accept)[0]


async def test_a_scraped_state_renders_as_prometheus_client_does(
    admin: redis.Redis, exporter: Exporter
) -> None:
    stats = {"enqueued": 30, "completed": 17, "failed": "not a number",
             latency_bucket_field(0.5): 10, latency_bucket_field(2.5): 7,
             "latency_sum": "21.75", "latency_count": 17, "error:TimeoutError": 2,
             'error:odd"Error': 1, "wait_le:0.75": 3, "wait_sum": "1.5"}  # fmt: skip
    seed_type(admin, "dining", waiting=7, processing=2, delayed=4, dead=3, stats=stats,
              oldest_age_ms=90_000, heartbeats_age_ms={'w"1\\': 1000, "w2": 5000})  # fmt: skip
    seed_type(admin, "flights", waiting=1)
    admin.set(QueueKeys("broken").stats, "a string, not a hash")  # WRONGTYPE: skipped
    admin.sadd(QueueKeys.types_key(), "broken")
    await exporter.scrape()  # discovery: the types are read in the steady pipeline next
    result = await exporter.scrape()
    assert result.snapshot is not None and result.snapshot.round_trips == 1
    assert [t.agent_type for t in result.snapshot.types] == ["dining", "flights"]
    assert result.snapshot.malformed == 2  # the counter that is not a number, the type
    for accept in (None, PROMETHEUS_2):
        assert exporter.render(result, accept) == reference(result, "", accept)


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    settings = ExporterSettings.from_args(["--redis-url", redis_url])
    instance = make_exporter_client(settings)
    assert isinstance(instance, aioredis.Redis)  # one server: the wire path
    yield instance
    await instance.aclose()


async def test_error_replies_come_back_in_place(admin: redis.Redis, client: aioredis.Redis) -> None:
    admin.set("a", "1")
    request = pack([("GET", "a"), ("LLEN", "a"), ("ZRANGE", "none", 0, -1, "WITHSCORES")])
    first, wrong_type, empty = await send_and_read(client, request, 3)
    assert first == "1"
    assert isinstance(wrong_type, ResponseError) and "WRONGTYPE" in str(wrong_type)
    assert empty == []


async def test_a_read_cut_short_leaves_no_reply_behind(
    admin: redis.Redis, client: aioredis.Redis
) -> None:
    admin.mset({"a": "1", "b": "2"})
    # Redis holds every client's commands for a second: the read below is cancelled
    # while its reply is still to come, as a scrape's deadline cancels one.
    assert sync_reply(admin.client_pause(1000, all=True))
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.1):
            await send_and_read(client, pack([("GET", "a")]), 1)
    # The pool hands the same connection back: had it kept the socket, the reply to
    # GET a would arrive here as the reply to GET b.
    assert await send_and_read(client, pack([("GET", "b")]), 1) == ["2"]


async def test_a_dropped_connection_is_replaced(admin: redis.Redis, client: aioredis.Redis) -> None:
    admin.set("a", "1")
    assert await send_and_read(client, pack([("PING",)]), 1) == ["PONG"]  # raw: no callback
    killed = sync_reply(admin.client_kill_filter(_type="normal", skipme=True))
    assert killed == 1  # the exporter's pooled connection
    assert await send_and_read(client, pack([("GET", "a")]), 1) == ["1"]


async def test_a_changed_stats_hash_shows_at_the_next_scrape(
    admin: redis.Redis, exporter: Exporter
) -> None:
    stats_key = QueueKeys("dining").stats
    seed_type(admin, "dining", stats={"enqueued": 1, latency_bucket_field(0.5): 1,
                                      "latency_sum": "0.25", "latency_count": 1})  # fmt: skip
    await exporter.scrape()  # discovery
    before = await exporter.scrape()
    exporter.render(before, None)
    admin.hincrby(stats_key, "enqueued", 1)
    admin.hincrby(stats_key, latency_bucket_field(2.5), 1)
    admin.hincrby(stats_key, "latency_count", 1)
    admin.hincrbyfloat(stats_key, "latency_sum", 2.0)
    after = await exporter.scrape()
    page = exporter.render(after, None)
    assert page == reference(after, "", None)
    samples = parse(page[0].decode())
    assert of(samples, "jobs_enqueued_total", agent_type="dining") == 2
    assert of(samples, "job_latency_seconds_bucket", agent_type="dining", le="2.5") == 2
    assert of(samples, "job_latency_seconds_sum", agent_type="dining") == 2.25
    # A hash as it was is not parsed again: the same reading, the same histogram.
    again = await exporter.scrape()
    assert again.snapshot is not None and after.snapshot is not None
    assert again.snapshot.types[0].latency is after.snapshot.types[0].latency
    assert exporter.render(again, None) == reference(again, "", None)


def test_a_zero_bound_keeps_its_sign_whatever_was_rendered_before() -> None:
    # 0.0 == -0.0: a template kept for le="0.0" was once reused for le="-0.0".
    pages = []
    for zero in (0.0, -0.0, 0.0):
        histogram = LatencyHistogram(((zero, 1), (math.inf, 2)), 3.0)
        snapshot = TypeSnapshot(
            agent_type="dining", queue_depth=0, in_progress=0, delayed_depth=0,
            dead_letter_depth=0, counters={}, latency=histogram, wait=None, run=None,
            error_classes={}, oldest_age_seconds=None, active_workers=0,
            last_heartbeat_seconds=None, workers=(),
        )  # fmt: skip
        result = ScrapeResult(Snapshot((snapshot,)), 0.0, 1)
        page = render_page(result, "", False)
        assert page == reference(result, "", None)[0]
        pages.append(page)
    assert b'le="-0.0"' in pages[1] and b'le="-0.0"' not in pages[2]
