"""`queue-exporter` at start: a Redis that refuses it is one line and exit 1; an unreachable
one is logged once and served as `queue_exporter_redis_up 0` (the process keeps running)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import httpx

from tests.cli.conftest import DINING_WORKER_PASSWORD, WRONG_PASSWORD
from tests.cli.runner import DEAD_REDIS, ROOT, child_env, one_line_failure, run
from tests.support.redis_server import RedisServer, find_free_port
from tests.support.workers import wait_until

EXPORTER = "platform_common.jobs_exporter"


def host_of(server: RedisServer) -> str:
    return f"127.0.0.1:{server.port}"


def start(url: str, *flags: str) -> subprocess.CompletedProcess[str]:
    port = str(find_free_port())
    return run("--redis-url", url, "--host", "127.0.0.1", "--port", port, *flags, module=EXPORTER)


def test_a_wrong_password_is_one_line_and_exit_1(refusing_redis: RedisServer) -> None:
    done = start(refusing_redis.url_for("admin", WRONG_PASSWORD))
    line = one_line_failure(done, host=host_of(refusing_redis), password=WRONG_PASSWORD)
    assert done.returncode == 1
    assert "refused the exporter: AuthenticationError" in line


def test_a_user_without_the_exporters_rights_is_one_line(refusing_redis: RedisServer) -> None:
    done = start(refusing_redis.url_for("dining-worker", DINING_WORKER_PASSWORD))
    line = one_line_failure(done, host=host_of(refusing_redis), password=DINING_WORKER_PASSWORD)
    assert "refused the exporter: NoPermissionError" in line


def test_an_unverified_tls_certificate_is_one_line(tls_redis: RedisServer) -> None:
    done = start(tls_redis.url.partition("?")[0])  # no CA: the handshake fails
    line = one_line_failure(done, host=host_of(tls_redis), password="ssl_ca_certs")
    assert "CERTIFICATE_VERIFY_FAILED" in line


def test_debug_adds_the_traceback(refusing_redis: RedisServer) -> None:
    done = start(refusing_redis.url_for("admin", WRONG_PASSWORD), "--debug")
    assert done.returncode == 1
    assert "Traceback" in done.stderr and WRONG_PASSWORD not in done.stderr
    assert done.stderr.rstrip().splitlines()[-1].startswith("queue-exporter: error: Redis at")


def test_a_bad_setting_is_one_line_and_exit_2() -> None:
    done = start(DEAD_REDIS, "--max-agent-types", "many")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        line for line in done.stderr.splitlines() if "--max-agent-types" in line
    ]
    assert "Traceback" not in done.stderr


def test_an_unreachable_redis_is_logged_once_and_served_as_down(tmp_path: Path) -> None:
    url = DEAD_REDIS.replace("//", f"//:{WRONG_PASSWORD}@")
    port = find_free_port()
    log_path = tmp_path / "exporter.log"
    with log_path.open("wb") as log:
        exporter = subprocess.Popen(
            [sys.executable, "-m", EXPORTER, "--redis-url", url, "--host", "127.0.0.1",
             "--port", str(port)],
            cwd=ROOT, env=child_env(), stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait_until(lambda: "Uvicorn running" in log_path.read_text() or exporter.poll() is not None)
        assert exporter.poll() is None, log_path.read_text()
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
        assert metrics.status_code == 200
        assert "queue_exporter_redis_up 0.0" in metrics.text
    finally:
        exporter.send_signal(signal.SIGTERM)
        code = exporter.wait(timeout=30)
    output = log_path.read_text()
    # uvicorn shuts down gracefully, then re-raises SIGTERM so the status says why it ended.
    assert code in (0, -signal.SIGTERM) and "Application shutdown complete" in output, output
    assert "Traceback" not in output and WRONG_PASSWORD not in output
    host = DEAD_REDIS.split("//")[1].partition("/")[0]
    at_start = [line for line in output.splitlines() if "unreachable at start" in line]
    assert len(at_start) == 1 and host in at_start[0], output


def test_help_still_works() -> None:
    done = run("--help", module=EXPORTER)
    assert done.returncode == 0 and "--redis-url" in done.stdout
