"""Start a server process with its output in a log file and wait for its /-/ready."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx


def start_until_ready(
    args: Sequence[str],
    log_path: Path,
    ready_url: str,
    *,
    name: str,
    error: Callable[[str], Exception],
    timeout: float,
) -> subprocess.Popen[bytes]:
    """Popen `args` (own session, output to `log_path`), then poll `ready_url` until it
    answers 200; `error(message)` is raised with the log's tail if it exits or times out."""
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            list(args), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def tail() -> str:
        return log_path.read_text(errors="replace")[-2000:]

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise error(f"{name} exited:\n{tail()}")
        try:
            if httpx.get(ready_url, timeout=1).status_code == 200:
                return process
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    process.kill()
    process.wait()
    raise error(f"{name} not ready within {timeout}s:\n{tail()}")
