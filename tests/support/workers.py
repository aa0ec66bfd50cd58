"""Launch queue worker processes (`python -m platform_common.jobs.worker`) for tests.

Each worker is a real child process with its own log file; tests stop, kill, pause
and resume them by signal. Shared by the queue, exporter and reliability tests:

    with WorkerGroup(redis_url, "dining", "tests.support.queue_handlers:behave",
                     env=FAST_SETTINGS) as group:
        worker = group.start(concurrency=4)
        worker.pause(); ...; worker.resume()
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

from tests.support.paths import REPO_ROOT

__all__ = ["FAST_SETTINGS", "ROOT", "WorkerGroup", "WorkerProcess", "wait_until"]

ROOT = REPO_ROOT
T = TypeVar("T")

# Short lease, reaper, backoff and poll intervals, so recovery paths run in about a
# second. Passed to workers as QUEUE_* environment variables (QueueSettings.from_env).
FAST_SETTINGS: dict[str, str] = {
    "QUEUE_LEASE_SECONDS": "1.5",
    "QUEUE_REAPER_INTERVAL": "0.2",
    "QUEUE_PROMOTE_INTERVAL": "0.05",
    "QUEUE_HEARTBEAT_INTERVAL": "0.5",
    "QUEUE_BLOCK_TIMEOUT": "0.2",
    "QUEUE_CLEANUP_INTERVAL": "0.5",
    "QUEUE_BACKOFF_BASE": "0.2",
    "QUEUE_SHUTDOWN_TIMEOUT": "5",
}


def wait_until(
    condition: Callable[[], T | None], timeout: float = 30.0, interval: float = 0.02
) -> T:
    """Poll `condition` until it returns something truthy, and return that (never None);
    AssertionError at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {condition}")
        time.sleep(interval)


class WorkerProcess:
    """One worker child process."""

    def __init__(self, process: subprocess.Popen[bytes], log_path: Path, worker_id: str) -> None:
        self.process = process
        self.log_path = log_path
        self.worker_id = worker_id

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def wait_for_log(self, text: str, timeout: float = 30.0) -> None:
        def seen() -> bool:
            if text in self.log():
                return True
            if not self.alive():
                raise AssertionError(f"worker exited ({self.process.returncode}):\n{self.log()}")
            return False

        wait_until(seen, timeout)

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM (graceful) and wait; returns the exit code."""
        if self.alive():
            self.process.send_signal(signal.SIGCONT)  # a paused worker cannot handle TERM
            self.process.terminate()
        return self.process.wait(timeout)

    def kill(self) -> None:
        """SIGKILL: no shutdown, no release of running jobs."""
        if self.alive():
            self.process.kill()
        self.process.wait(30)

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)


class WorkerGroup:
    """Starts workers for one agent type and handler; stops every one of them on exit."""

    def __init__(
        self,
        redis_url: str,
        agent_type: str,
        handler: str,
        *,
        env: Mapping[str, str] | None = None,
        log_dir: str | None = None,
        module: str = "platform_common.jobs.worker",
    ) -> None:
        self.redis_url = redis_url
        self.module = module  # what `python -m` runs: the worker CLI or a wrapper of it
        self.agent_type = agent_type
        self.handler = handler
        self.env = dict(env or {})
        self.log_dir = Path(log_dir or tempfile.mkdtemp(prefix="pcj-workers-"))
        self.workers: list[WorkerProcess] = []

    def start(
        self,
        *,
        concurrency: int = 4,
        env: Mapping[str, str] | None = None,
        wait_ready: bool = True,
    ) -> WorkerProcess:
        """Start one worker; by default wait until it logged 'worker ready'."""
        index = len(self.workers)
        worker_id = f"test-worker-{index}-{os.getpid()}"
        log_path = self.log_dir / f"{worker_id}.log"
        child_env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("QUEUE_")},
            "PYTHONPATH": str(ROOT),
            "QUEUE_REDIS_URL": self.redis_url,
            **self.env,
            **(env or {}),
        }
        with open(log_path, "wb") as log_file:
            process = subprocess.Popen(
                [sys.executable, "-m", self.module,
                 "--agent-type", self.agent_type, "--handler", self.handler,
                 "--concurrency", str(concurrency), "--worker-id", worker_id],
                cwd=ROOT, env=child_env, stdout=log_file, stderr=subprocess.STDOUT,
            )  # fmt: skip
        worker = WorkerProcess(process, log_path, worker_id)
        self.workers.append(worker)
        if wait_ready:
            worker.wait_for_log("worker ready")
        return worker

    def start_many(self, count: int, **kwargs: object) -> list[WorkerProcess]:
        started = [self.start(wait_ready=False, **kwargs) for _ in range(count)]  # type: ignore[arg-type]
        for worker in started:
            worker.wait_for_log("worker ready")
        return started

    def stop_all(self) -> None:
        for worker in self.workers:
            if worker.alive():
                try:
                    worker.stop(timeout=15)
                except subprocess.TimeoutExpired:
                    worker.kill()

    def __enter__(self) -> WorkerGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()
