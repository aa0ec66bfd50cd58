"""The migration recipe (examples/scan_agent.py) works as written: two agent instances
share one Redis.

The scan agent (examples/scan_agent.py) is the recipe verbatim inside FastAPI. Two
copies of the module (each with its own module-level `job_store`) are driven over
HTTP in process; then two real uvicorn processes, a true pair of replicas.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from types import ModuleType
from typing import Any

import httpx
import pytest

from tests.support.paths import REPO_ROOT
from tests.support.redis_server import find_free_port

AGENT_FILE = REPO_ROOT / "examples" / "scan_agent.py"


def load_agent_copy(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, AGENT_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
async def two_agents(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    monkeypatch.setenv("JOB_STORE_URL", redis_url)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "scan-agent")
    pod_a, pod_b = load_agent_copy("scan_agent_pod_a"), load_agent_copy("scan_agent_pod_b")
    assert pod_a.job_store is not pod_b.job_store
    clients = [
        httpx.AsyncClient(transport=httpx.ASGITransport(app=pod.app), base_url=f"http://{name}")
        for name, pod in (("pod-a", pod_a), ("pod-b", pod_b))
    ]
    try:
        yield clients[0], clients[1]
    finally:
        for client in clients:
            await client.aclose()
        for pod in (pod_a, pod_b):
            await asyncio.gather(*pod._running)
            await pod.job_store.close()


async def wait_for_status(
    client: httpx.AsyncClient, job_id: str, wanted: str, deadline_s: float = 10.0
) -> dict[str, Any]:
    started = time.monotonic()
    while True:
        response = await client.get(f"/scans/{job_id}")
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        if body["status"] == wanted:
            return body
        assert time.monotonic() - started < deadline_s, f"{job_id} stuck in {body['status']}"
        await asyncio.sleep(0.02)


async def test_a_scan_started_on_one_pod_finishes_and_is_seen_on_the_other(
    two_agents: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    pod_a, pod_b = two_agents
    response = await pod_a.post("/scans", json={"target": "repo-1"})
    assert response.status_code == 200
    job_id = response.json()["job_id"]
    seen = (await pod_b.get(f"/scans/{job_id}")).json()
    assert seen["payload"] == {"request": {"target": "repo-1"}}
    assert seen["status"] in ("pending", "running", "succeeded")
    done = await wait_for_status(pod_b, job_id, "succeeded")
    assert done["result"] == {"target": "repo-1", "findings": 3}
    assert done["version"] == 3  # create, running, succeeded


async def test_a_failing_scan_reports_its_error_on_the_other_pod(
    two_agents: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    pod_a, pod_b = two_agents
    job_id = (await pod_b.post("/scans", json={"target": "r", "fail": True})).json()["job_id"]
    failed = await wait_for_status(pod_a, job_id, "failed")
    assert failed["error"] == "scan of 'r' failed" and failed["result"] is None


async def test_unknown_and_bad_ids(two_agents: tuple[httpx.AsyncClient, httpx.AsyncClient]) -> None:
    pod_a, _ = two_agents
    missing = await pod_a.get("/scans/0123abcd")
    assert (missing.status_code, missing.json()) == (404, {"error": "not found"})
    assert (await pod_a.get("/scans/bad%20id")).status_code == 400


@pytest.fixture
def two_uvicorn_pods(redis_url: str) -> Iterator[tuple[str, str]]:
    env = os.environ | {"JOB_STORE_URL": redis_url, "OTEL_SERVICE_NAME": "scan-agent"}
    root = REPO_ROOT
    ports = [find_free_port(), find_free_port()]
    uvicorn = [sys.executable, "-m", "uvicorn", "examples.scan_agent:app", "--host", "127.0.0.1",
               "--log-level", "warning"]  # fmt: skip
    pods = [
        subprocess.Popen(
            [*uvicorn, "--port", str(port)],
            cwd=root,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for port in ports
    ]
    try:
        for pod, port in zip(pods, ports, strict=True):
            deadline = time.monotonic() + 20
            while True:
                assert pod.poll() is None, pod.stderr.read().decode() if pod.stderr else ""
                try:
                    httpx.get(f"http://127.0.0.1:{port}/scans/x1", timeout=1)
                    break
                except httpx.TransportError:
                    assert time.monotonic() < deadline, "uvicorn did not start"
                    time.sleep(0.05)
        yield f"http://127.0.0.1:{ports[0]}", f"http://127.0.0.1:{ports[1]}"
    finally:
        for pod in pods:
            pod.terminate()
            pod.wait(timeout=10)
            if pod.stderr:
                pod.stderr.close()


async def test_two_uvicorn_processes_share_jobs(two_uvicorn_pods: tuple[str, str]) -> None:
    url_a, url_b = two_uvicorn_pods
    async with (
        httpx.AsyncClient(base_url=url_a) as pod_a,
        httpx.AsyncClient(base_url=url_b) as pod_b,
    ):
        job_ids = [
            (await pod.post("/scans", json={"target": f"t{n}"})).json()["job_id"]
            for n, pod in enumerate([pod_a, pod_b, pod_a])
        ]
        for job_id in job_ids:
            for pod in (pod_a, pod_b):
                done = await wait_for_status(pod, job_id, "succeeded")
                assert done["job_id"] == job_id


def test_the_agent_does_not_start_when_redis_is_unreachable() -> None:
    # The lifespan's `await job_store.ping()` is the startup health check: uvicorn
    # reports the failed startup and exits instead of serving 500s on every request.
    dead = f"redis://127.0.0.1:{find_free_port()}/0"
    env = os.environ | {"JOB_STORE_URL": dead, "OTEL_SERVICE_NAME": "scan-agent"}
    port = str(find_free_port())
    done = subprocess.run(
        [sys.executable, "-m", "uvicorn", "examples.scan_agent:app", "--host", "127.0.0.1",
         "--port", port],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert "BackendUnavailable" in done.stderr and "Application startup failed" in done.stderr
    assert "Uvicorn running" not in done.stderr
