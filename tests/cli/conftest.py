"""The CLI tests' fixtures, one per concept: the Redis a test runs the commands against
(`redis_url`: the single node, and the cluster too for a test that takes `redis_backend`'s
params, i.e. every test of the operator command files that reaches Redis), a raw client of
it, `agentjobs` (the command line in this process), an environment without the settings
the commands read, a URL nothing answers, and servers that refuse the CLIs (a wrong
password, a user without rights, a TLS mismatch)."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator

import pytest

from platform_common.jobs import acl
from platform_common.jobs.cli import main
from tests.cli.runner import Ran
from tests.support.backends import CLUSTER, SINGLE, VALKEY, parametrize_backends
from tests.support.redis_server import RedisServer
from tests.support.worker_records import SyncClient, sync_client

_URL_FIXTURES = {SINGLE: "single_node_url", CLUSTER: "cluster_url", VALKEY: "valkey_url"}

ADMIN_PASSWORD = "admin-pw-cli-refusals-41d0"
WRONG_PASSWORD = "wrong-pw-cli-refusals-9a7e"
DINING_WORKER_PASSWORD = "dining-worker-pw-cli-0b3c"


@pytest.fixture(scope="package")
def refusing_redis() -> Iterator[RedisServer]:
    """`admin` may do anything; `dining-worker` is a worker scoped to `dining` alone."""
    worker = acl.acl_file_line(
        "dining-worker", DINING_WORKER_PASSWORD, "worker", agent_types=["dining"],
        store_agents=["dining-agent"],
    )  # fmt: skip
    users = [f"admin on >{ADMIN_PASSWORD} ~* &* +@all", "default off"]
    server = RedisServer(acl_users=[*users, worker.removeprefix("user ")]).start()
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture(scope="package")
def tls_redis() -> Iterator[RedisServer]:
    server = RedisServer(tls=True).start()
    try:
        yield server
    finally:
        server.cleanup()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_backends(metafunc, "redis_backend", (SINGLE, CLUSTER))


@pytest.fixture
def redis_backend(request: pytest.FixtureRequest) -> str:
    backend: str = request.param
    return backend


@pytest.fixture
def redis_url(redis_backend: str, request: pytest.FixtureRequest) -> str:
    url: str = request.getfixturevalue(_URL_FIXTURES[redis_backend])
    return url


@pytest.fixture
def client(redis_url: str) -> Iterator[SyncClient]:
    yield from sync_client(redis_url)


@pytest.fixture(autouse=True)
def operator_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The commands read the worker's QUEUE_* settings: none but the ones a test sets."""
    for name in list(os.environ):
        if name.startswith(("QUEUE_", "REDIS_URL", "AGENTJOBS_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("COLUMNS", "200")  # rich tables: no truncated cells


@pytest.fixture
def agentjobs(capsys: pytest.CaptureFixture[str], redis_url: str) -> Callable[..., Ran]:
    """Run `agentjobs <args> --redis-url <the test's Redis>` in this process."""

    def ran(*args: str) -> Ran:
        capsys.readouterr()
        code = main([*args, "--redis-url", redis_url])
        captured = capsys.readouterr()
        return Ran(code, captured.out, captured.err)

    return ran


@pytest.fixture
def refused_url() -> Iterator[str]:
    """An http URL on which nothing listens: the connection is refused at once."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, never listening
        yield f"http://127.0.0.1:{closed.getsockname()[1]}"
