"""The exporter's HTTP server under slow, half-open and idle connections, and HEAD."""

from __future__ import annotations

import asyncio
import contextlib
import re
import resource
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

import httpx
import pytest
import redis
import uvicorn
from uvicorn.server import ServerState

from platform_common.jobs_exporter.__main__ import (
    GuardedH11Protocol,
    connection_cap,
    guarded_protocol,
    listen_backlog,
)
from platform_common.jobs_exporter.app import create_app
from platform_common.jobs_exporter.runbook_pages import INDEX_PAGE, default_directory
from platform_common.jobs_exporter.settings import ExporterSettings
from tests.support.exporter_data import of, parse, seed_type
from tests.support.redis_server import RedisServer, find_free_port

SCRAPE_TIMEOUT = 10.0
"""Prometheus' scrape_timeout in deploy/ (prometheus.yml, servicemonitor.yaml)."""
HALF_SENT = 1100
FILE_LIMIT = 1024  # the exporter's RLIMIT_NOFILE in the reproduction
PARTIAL = b"GET /metrics HTTP/1.1\r\nHost: x\r\n"  # the blank line never comes


# -- HEAD on every GET route (in process) -------------------------------------------------
async def test_every_get_route_answers_head_with_the_get_headers(redis_url: str) -> None:
    app = create_app(ExporterSettings.from_args(["--redis-url", redis_url]))
    # The schema lists every route, those of included routers too.
    paths = [path for path, ops in app.openapi()["paths"].items() if "get" in ops]
    assert {"/metrics", "/healthz", "/readyz", "/runbooks/", "/runbooks/{alert_name}"} <= set(paths)
    page = next(p.stem for p in sorted(default_directory().glob("*.md")) if p.name != INDEX_PAGE)
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://exporter") as client:
            for path in [p.replace("{alert_name}", page) for p in paths] + ["/runbooks/Nope"]:
                got, head = await client.get(path), await client.head(path)
                assert (head.status_code, head.content) == (got.status_code, b""), path
                assert head.headers["content-type"] == got.headers["content-type"], path
                if path != "/metrics":  # a scrape's own duration changes its length
                    assert head.headers["content-length"] == got.headers["content-length"]
    finally:
        await app.state.exporter.aclose()


# -- the guard, on an in-process server ---------------------------------------------------
@dataclass
class GuardedServer:
    port: int
    protocol: type[GuardedH11Protocol]
    state: ServerState
    clients: list[asyncio.StreamWriter] = field(default_factory=list)

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.clients.append(writer)
        return reader, writer


@pytest.fixture
async def guarded(redis_url: str, request: pytest.FixtureRequest) -> AsyncIterator[GuardedServer]:
    header_timeout, max_connections = request.param
    app = create_app(ExporterSettings.from_args(["--redis-url", redis_url]))
    protocol = guarded_protocol(header_timeout=header_timeout, max_connections=max_connections)
    config = uvicorn.Config(app, http=protocol, ws="none", lifespan="off", log_level="warning")
    state = ServerState()
    server = await asyncio.get_running_loop().create_server(
        lambda: protocol(config=config, server_state=state, app_state={}), "127.0.0.1", 0
    )
    harness = GuardedServer(server.sockets[0].getsockname()[1], protocol, state)
    try:
        yield harness
    finally:
        for writer in harness.clients:
            writer.close()
        server.close()
        for connection in list(state.connections):
            connection.transport.abort()
        await server.wait_closed()
        for writer in harness.clients:
            with contextlib.suppress(ConnectionError):  # the server may have reset it
                await writer.wait_closed()
        await app.state.exporter.aclose()


async def get(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str) -> int:
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    length = re.search(rb"content-length: (\d+)", head, re.I)
    assert length is not None, head
    await reader.readexactly(int(length[1]))
    return int(head.split(b" ", 2)[1])


async def closed_by_server(reader: asyncio.StreamReader) -> bool:
    try:
        return await reader.read(1) == b""
    except ConnectionResetError:
        return True


@pytest.mark.parametrize("guarded", [(0.5, 100)], indirect=True)
async def test_a_request_never_finished_is_dropped_and_a_whole_one_served(
    guarded: GuardedServer,
) -> None:
    async with asyncio.timeout(SCRAPE_TIMEOUT):  # only bounds a hang
        trickling_reader, trickling = await guarded.connect()
        trickling.write(PARTIAL)
        reader, writer = await guarded.connect()
        assert await get(reader, writer, "/healthz") == 200
        # The half-sent request gets no answer, only the end of its connection; the
        # served one, now idle, is closed the same way (its next request is as overdue).
        assert await closed_by_server(trickling_reader)
        assert await closed_by_server(reader)
    assert guarded.protocol.guard.timed_out == 2
    assert guarded.protocol.guard.evicted == 0


@pytest.mark.parametrize("guarded", [(3600.0, 3)], indirect=True)
async def test_the_connection_waiting_longest_makes_room_for_a_new_one(
    guarded: GuardedServer,
) -> None:
    async with asyncio.timeout(SCRAPE_TIMEOUT):  # only bounds a hang
        first, second, third = [await guarded.connect() for _ in range(3)]
        for reader, writer in (first, second, third, first):  # `first` again: now newest
            assert await get(reader, writer, "/healthz") == 200
        half_open = await guarded.connect()  # a fourth: over the cap of 3
        half_open[1].write(PARTIAL)
        assert await closed_by_server(second[0])  # waited longest for its next request
        for reader, writer in (first, third):
            assert await get(reader, writer, "/healthz") == 200
        newest = await guarded.connect()  # the half-open one has now waited longest
        assert await get(*newest, "/healthz") == 200
        assert await closed_by_server(half_open[0])
    assert guarded.protocol.guard.evicted == 2
    assert len(guarded.state.connections) == 3


def test_the_cap_leaves_descriptors_for_redis_and_the_accept_bursts() -> None:
    # asyncio accepts up to `backlog` connections at a time before the guard sees them.
    assert 0 < connection_cap(FILE_LIMIT) < FILE_LIMIT - 4 * listen_backlog(FILE_LIMIT)
    assert connection_cap(resource.RLIM_INFINITY) == connection_cap(10**9) == 4096


# -- the real process, with the reproduction's file limit -----------------------------------
@dataclass
class ExporterProcess:
    port: int
    process: subprocess.Popen[bytes]
    output: list[str]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _limit_files() -> None:  # runs in the child, before exec
    resource.setrlimit(resource.RLIMIT_NOFILE, (FILE_LIMIT, FILE_LIMIT))


@pytest.fixture(scope="module")
def exporter_process(redis_server: RedisServer) -> Iterator[ExporterProcess]:
    port = find_free_port()
    args = [sys.executable, "-m", "platform_common.jobs_exporter", "--redis-url",
            redis_server.url, "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
    process = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=_limit_files
    )
    output: list[str] = []
    listening = threading.Event()

    def drain() -> None:  # reads the log until the process ends, so it never blocks on it
        assert process.stdout is not None
        for line in process.stdout:
            output.append(line.decode(errors="replace"))
            if "Uvicorn running on" in output[-1]:
                listening.set()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        if not listening.wait(30):
            pytest.fail("the exporter did not start:\n" + "".join(output))
        yield ExporterProcess(port, process, output)
    finally:
        process.terminate()
        try:
            process.wait(SCRAPE_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        reader.join()
        assert process.stdout is not None
        process.stdout.close()


@pytest.fixture
def files_for_the_clients() -> Iterator[None]:
    """Room for HALF_SENT sockets in this process; the limit is restored afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = HALF_SENT + 256
    if soft != resource.RLIM_INFINITY and soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {needed}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_head_is_answered_like_get(exporter_process: ExporterProcess) -> None:
    page = next(p.stem for p in sorted(default_directory().glob("*.md")) if p.name != INDEX_PAGE)
    paths = ["/metrics", "/healthz", "/readyz", "/runbooks/", f"/runbooks/{page}", "/"]
    with httpx.Client(base_url=exporter_process.url, timeout=SCRAPE_TIMEOUT) as client:
        for path in [*paths, "/runbooks/NoSuchAlert"]:
            got, head = client.get(path), client.head(path)
            assert (head.status_code, head.content) == (got.status_code, b""), path
            assert head.headers["content-type"] == got.headers["content-type"], path
            if path != "/metrics":  # a scrape's own duration changes its length
                assert head.headers["content-length"] == got.headers["content-length"], path
        assert client.get("/runbooks/NoSuchAlert").status_code == 404


def test_a_scrape_is_answered_while_1100_requests_hang_half_sent(
    exporter_process: ExporterProcess, redis_server: RedisServer, files_for_the_clients: None
) -> None:
    admin = redis.Redis(port=redis_server.port, decode_responses=True)
    with contextlib.ExitStack() as stack:
        stack.callback(admin.close)
        admin.flushall()
        seed_type(admin, "dining", waiting=3)
        hanging = []
        for _ in range(HALF_SENT):
            sock = socket.create_connection(("127.0.0.1", exporter_process.port), SCRAPE_TIMEOUT)
            stack.enter_context(sock)
            hanging.append(sock)
            with contextlib.suppress(ConnectionError):  # dropped already, to make room
                sock.sendall(PARTIAL)
        started = time.monotonic()
        response = httpx.get(f"{exporter_process.url}/metrics", timeout=SCRAPE_TIMEOUT)
        elapsed = time.monotonic() - started
        still_held = sum(1 for sock in hanging if not _closed(sock))
        print(f"\nscrape in {elapsed:.3f}s; {still_held} of {HALF_SENT} half-sent held")
    assert response.status_code == 200
    assert elapsed < SCRAPE_TIMEOUT
    samples = parse(response.text)
    assert of(samples, "queue_exporter_redis_up") == 1  # Redis reached too: descriptors left
    assert of(samples, "queue_depth", agent_type="dining") == 3
    assert exporter_process.process.poll() is None
    log = "".join(exporter_process.output)
    assert "out of system resource" not in log and "Too many open files" not in log, log
    assert still_held <= connection_cap(FILE_LIMIT)  # never more than the cap held


def _closed(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False  # open, and (rightly) no answer to a request never finished
    except ConnectionError:
        return True
