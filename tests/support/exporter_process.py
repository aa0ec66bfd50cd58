"""`python -m platform_common.jobs_exporter` as a child process on a free port, as a user
runs it: started once it answers /healthz, its log kept in a file (a pipe nobody reads
would stall a chatty exporter)."""

from __future__ import annotations

import subprocess
import sys
import tempfile

import httpx

from tests.support.paths import REPO_ROOT
from tests.support.redis_server import find_free_port
from tests.support.workers import wait_until

__all__ = ["ExporterProcess"]


class ExporterProcess:
    def __init__(self, *args: str) -> None:
        self.port = find_free_port()
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 (closed in stop())
        self._output = ""
        self.process = subprocess.Popen(
            [sys.executable, "-m", "platform_common.jobs_exporter",
             "--host", "127.0.0.1", "--port", str(self.port), *args],
            cwd=REPO_ROOT, stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        wait_until(self._healthy, timeout=30)

    def _healthy(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"exporter exited: {self.output()}")
        try:
            return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        if self.log.closed:
            return self._output
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def stop(self) -> tuple[int, str]:
        """Stop it (SIGTERM) if it still runs; its exit code and log. Again: the same."""
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=15)
        if not self.log.closed:
            self._output = self.output()
            self.log.close()
        return self.process.returncode, self._output
