"""One side of bench.tracing in its own child process (PhaseChild): the package as it was
before tracing (OLD_REVISION), or this checkout's working tree with tracing off or on.
Every side runs the same child, bench/tracing_phases.py, in a process of the same shape,
so no side measures in the parent's interpreter (with its heap, threads and imports) while
another measures in a fresh one; and two versions of platform_common never share one
interpreter.

For a revision, `git archive` puts its platform_common into a temporary directory (no
worktree: nothing is registered in the repository) next to a copy of tracing_phases.py,
and `python -P -m tracing_phases` runs there with only that directory on PYTHONPATH. For
this checkout, `python -P -m bench.tracing_phases` runs from the repository root with only
the root on PYTHONPATH. -P keeps the script's own directory off sys.path, and PYTHONPATH
comes before site-packages, where the editable install points at this checkout; the child
prints the directory of the platform_common.jobs.queue it imported and the parent refuses
any other tree than the one intended (platform_common is a namespace package, so its own
__path__ would list both). One child serves every block and round of its side, so its
interpreter and Lua scripts warm up once.
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

Job = dict[str, Any]


class PhaseChildError(RuntimeError):
    """A revision could not be checked out, or a child failed or imported the wrong tree."""


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
        raise PhaseChildError(f"cannot run git/tar for {revision}: {error}") from error
    except subprocess.CalledProcessError as error:
        stderr = error.stderr.decode(errors="replace").strip()
        raise PhaseChildError(f"git archive {revision} failed: {stderr}") from error


class PhaseChild:
    """A child process measuring one side; use as a context manager.

    `revision`: the commit whose platform_common it imports (archived), or None for this
    checkout's working tree. `traced`: the child passes an SDK TracerProvider whose
    exporter drops every span (tracing on); otherwise nothing (off, or a tree from before
    tracing)."""

    def __init__(self, revision: str | None = None, *, traced: bool = False) -> None:
        self.revision = revision
        self.traced = traced
        self.package = ""
        """The platform_common/jobs/queue directory the child imported."""
        self._archive: Path | None = None
        self._child: subprocess.Popen[str] | None = None

    @property
    def name(self) -> str:
        tree = self.revision or "this checkout"
        return f"{tree}, tracing {'on' if self.traced else 'off'}"

    def __enter__(self) -> PhaseChild:
        try:
            tree, module = self._tree()
            argv = [sys.executable, "-P", "-m", module, *(["--traced"] if self.traced else [])]
            self._child = subprocess.Popen(
                argv, cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, text=True,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            )  # fmt: skip
            self.package = self._read()["package"]
            expected = (tree / "platform_common" / "jobs" / "queue").resolve()
            if Path(self.package).resolve() != expected:
                raise PhaseChildError(
                    f"the child ({self.name}) imported platform_common.jobs.queue from "
                    f"{self.package}, not {expected}"
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

    def _tree(self) -> tuple[Path, str]:
        """The tree the child runs in and the module it runs there."""
        if self.revision is None:
            return ROOT, "bench.tracing_phases"
        self._archive = Path(tempfile.mkdtemp(prefix="bench-tracing-old-"))
        _git_archive(self.revision, self._archive)
        shutil.copy(PHASES_FILE, self._archive / "tracing_phases.py")
        return self._archive, "tracing_phases"

    def enqueue_block(self, url: str, jobs: list[Job]) -> float:
        """Seconds to enqueue `jobs` one by one (the server is not flushed)."""
        return float(self._ask({"op": "enqueue", "url": url, "jobs": jobs})["seconds"])

    def round(
        self, url: str, many: list[Job], agent_type: str, concurrency: int
    ) -> dict[str, float]:
        """jobs/s of enqueue_many and drain for `many`, on a flushed server."""
        request = {
            "op": "round", "url": url, "many": many,
            "agent_type": agent_type, "concurrency": concurrency,
        }  # fmt: skip
        return {phase: float(rate) for phase, rate in self._ask(request).items()}

    def spans(self) -> int:
        """Spans the child exported so far (after flushing its queued ones; 0 untraced)."""
        return int(self._ask({"op": "spans"})["spans"])

    def _pipes(self) -> tuple[IO[str], IO[str]]:
        if self._child is None or self._child.stdin is None or self._child.stdout is None:
            raise PhaseChildError(f"the child ({self.name}) is not running (use `with`)")
        return self._child.stdin, self._child.stdout

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        stdin = self._pipes()[0]
        try:
            stdin.write(json.dumps(request) + "\n")
            stdin.flush()
        except BrokenPipeError as error:
            raise PhaseChildError(f"the child ({self.name}) has exited") from error
        return self._read()

    def _read(self) -> dict[str, Any]:
        line = self._pipes()[1].readline()
        if not line:
            code = self._child.wait() if self._child is not None else None
            raise PhaseChildError(
                f"the child ({self.name}) exited (code {code}); its stderr is above"
            )
        answer: dict[str, Any] = json.loads(line)
        return answer

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
        if self._archive is not None:
            shutil.rmtree(self._archive, ignore_errors=True)
            self._archive = None
