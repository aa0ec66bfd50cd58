"""The demo's child processes: each in its own process group, its output in a log file,
stopped group by group with a deadline (SIGTERM, then SIGKILL), so none outlives the demo.

Own process groups, because a Ctrl-C in the terminal would otherwise reach every child at
once: Redis would shut down under the workers still finishing their jobs. The demo
stops them itself, in order.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Child", "DemoError", "ProcessGroup", "free_port", "port_to_use"]

STOP_TIMEOUT = 10.0
"""Seconds a stopping group of children gets after SIGTERM before SIGKILL."""


class DemoError(RuntimeError):
    """A server of the demo is missing, did not start, or did not become ready."""


def free_port() -> int:
    """A port nothing listens on now (the kernel's choice)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def port_to_use(preferred: int, *, any_port: bool) -> int:
    """`preferred` when nothing listens there (and `any_port` is off), else a free port."""
    if not any_port:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", preferred)) != 0:
                return preferred
    return free_port()


@dataclass(frozen=True, slots=True)
class Child:
    """One started process: what it is, its handle and where its output goes."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "<no log>"


class ProcessGroup:
    """Children started together and stopped together (`with ProcessGroup(dir) as group`)."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.children: list[Child] = []

    def start(self, name: str, args: Sequence[str], env: dict[str, str] | None = None) -> Child:
        log_path = self.log_dir / f"{name}.log"
        with log_path.open("ab") as log:
            process = subprocess.Popen(
                list(args), stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        child = Child(name, process, log_path)
        self.children.append(child)
        return child

    def wait_ready(
        self, child: Child, ready: Callable[[], bool] | str, timeout: float = 30.0
    ) -> None:
        """Poll `ready` (a callable, or a URL that must answer 200) until it holds."""
        check = ready if callable(ready) else (lambda: _answers_ok(ready))
        deadline = time.monotonic() + timeout
        while True:
            if child.process.poll() is not None:
                raise DemoError(f"{child.name} exited at start:\n{child.log_tail()}")
            if check():
                return
            if time.monotonic() >= deadline:
                raise DemoError(f"{child.name} not ready within {timeout:g}s:\n{child.log_tail()}")
            time.sleep(0.1)

    def stop(self) -> None:
        """SIGTERM every child's process group, wait together, SIGKILL what is left."""
        running = [child for child in self.children if child.process.poll() is None]
        for child in running:
            _signal_group(child.process, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        for child in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        for child in self.children:
            # The leader gone does not mean its group is: a grandchild may still run.
            _signal_group(child.process, signal.SIGKILL)
            child.process.wait()
        self.children.clear()

    def __enter__(self) -> ProcessGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    # start_new_session made the child the leader of a group whose id is its pid.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signum)


def _answers_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False
