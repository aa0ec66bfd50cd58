"""The queue as it was before tracing (OLD_REVISION), measured by bench.tracing's own phase
code in a child process: two versions of platform_common never share one interpreter.

`git archive` puts OLD_REVISION's platform_common into a temporary directory (no
worktree: nothing is registered in the repository) next to a copy of
bench/tracing_phases.py, and `python -P -m tracing_phases` runs there with only that
directory on PYTHONPATH. -P keeps the script's own directory off sys.path, and
PYTHONPATH comes before site-packages, where the editable install points at this
checkout; the child prints the directory of the platform_common.jobs.queue it imported
and the parent refuses any other tree (platform_common is a namespace package, so its
own __path__ would list both). One child serves every round, so its interpreter and
Lua scripts warm up once, as the parent's do.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import TracebackType
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent
PHASES_FILE = Path(__file__).resolve().parent / "tracing_phases.py"

OLD_REVISION = "e752334bb96301dd230cbc29802c7cc407dd97a0"
"""The parent of cfd84f0, the commit that added platform_common/jobs/queue/tracing.py:
the queue's hot paths as they were before any span was started in them."""


class OldRevisionError(RuntimeError):
    """OLD_REVISION could not be checked out or its child failed (run with --no-old)."""


def _git_archive(revision: str, into: Path) -> None:
    """Extract `revision`'s platform_common into `into`."""
    try:
        archive = subprocess.run(
            ["git", "archive", "--format=tar", revision, "platform_common"],
            cwd=ROOT, capture_output=True, check=True,
        ).stdout  # fmt: skip
        subprocess.run(
            ["tar", "-x", "-C", str(into)], input=archive, capture_output=True, check=True
        )
    except OSError as error:
        raise OldRevisionError(f"cannot run git/tar for {revision}: {error}") from error
    except subprocess.CalledProcessError as error:
        stderr = error.stderr.decode(errors="replace").strip()
        raise OldRevisionError(f"git archive {revision} failed: {stderr}") from error


class OldRevision:
    """A child process measuring with `revision`'s package; use as a context manager."""

    def __init__(self, revision: str = OLD_REVISION) -> None:
        self.revision = revision
        self.package = ""
        """The platform_common/jobs/queue directory the child imported (in the archive)."""
        self._tree: Path | None = None
        self._child: subprocess.Popen[str] | None = None

    def __enter__(self) -> OldRevision:
        self._tree = Path(tempfile.mkdtemp(prefix="bench-tracing-old-"))
        try:
            _git_archive(self.revision, self._tree)
            shutil.copy(PHASES_FILE, self._tree / "tracing_phases.py")
            env = {**os.environ, "PYTHONPATH": str(self._tree)}
            self._child = subprocess.Popen(
                [sys.executable, "-P", "-m", "tracing_phases"],
                cwd=self._tree, env=env, text=True,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            )  # fmt: skip
            self.package = self._read()["package"]
            expected = (self._tree / "platform_common" / "jobs" / "queue").resolve()
            if Path(self.package).resolve() != expected:
                raise OldRevisionError(
                    f"the child imported platform_common.jobs.queue from {self.package}, "
                    f"not {expected}"
                )
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _pipes(self) -> tuple[IO[str], IO[str]]:
        if self._child is None or self._child.stdin is None or self._child.stdout is None:
            raise OldRevisionError("the old revision's child is not running (use `with`)")
        return self._child.stdin, self._child.stdout

    def _read(self) -> dict[str, Any]:
        line = self._pipes()[1].readline()
        if not line:
            code = self._child.wait() if self._child is not None else None
            raise OldRevisionError(
                f"the child measuring {self.revision} exited (code {code}); its stderr is above"
            )
        answer: dict[str, Any] = json.loads(line)
        return answer

    def measure(
        self,
        url: str,
        single: list[dict[str, Any]],
        many: list[dict[str, Any]],
        agent_type: str,
        concurrency: int,
    ) -> dict[str, float]:
        """jobs/s of each phase, as tracing_phases.measure with the old package."""
        request = {
            "url": url, "single": single, "many": many,
            "agent_type": agent_type, "concurrency": concurrency,
        }  # fmt: skip
        stdin = self._pipes()[0]
        try:
            stdin.write(json.dumps(request) + "\n")
            stdin.flush()
        except BrokenPipeError as error:
            raise OldRevisionError(f"the child measuring {self.revision} has exited") from error
        return {phase: float(rate) for phase, rate in self._read().items()}

    def close(self) -> None:
        """End the child (EOF on its stdin ends its loop) and remove the archive."""
        child, self._child = self._child, None
        if child is not None:
            if child.stdin is not None:
                child.stdin.close()
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
            if child.stdout is not None:
                child.stdout.close()
        if self._tree is not None:
            shutil.rmtree(self._tree, ignore_errors=True)
            self._tree = None
