"""Every Python and shell block of README.md and docs/*.md runs as written.

Each runs in a fresh directory against a redis-server this module starts (QUEUE_REDIS_URL,
REDIS_URL and JOB_STORE_URL point at it, the venv's commands come first on PATH, the
repository is on PYTHONPATH as if run from its root) and must exit 0, printing exactly
its `<!-- output -->` block if it has one. A file's `<!-- runs-in-background -->` blocks
(a worker, the exporter) start before its other blocks and must still be running after
them. A block not meant to run carries `<!-- not-run: reason -->`, reported as a skip.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docs.code_blocks import CodeBlock, code_blocks
from tests.support.paths import REPO_ROOT
from tests.support.redis_server import RedisServer, find_free_port

DOCUMENTS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
BLOCK_TIMEOUT = 60.0
"""A hang guard, not a speed check: a block still running then has failed."""
_STRICT_PREFIXES = ("QUEUE_", "EXPORTER_", "JOB_STORE_", "JOBSTATE_", "AGENTJOBS_")


def _runnable_blocks() -> list[CodeBlock]:
    return [block for path in DOCUMENTS for block in code_blocks(path) if block.runs_as]


def _params() -> list[object]:
    params: list[object] = []
    for block in _runnable_blocks():
        if block.marker == "runs-in-background":
            continue  # started by the `services` fixture, checked at its end
        marks = [pytest.mark.skip(reason=block.reason)] if block.marker == "not-run" else []
        params.append(pytest.param(block, id=block.name, marks=marks))
    return params


@pytest.fixture(scope="module")
def example_env() -> Iterator[dict[str, str]]:
    with RedisServer() as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith(_STRICT_PREFIXES)}
        env.update(
            QUEUE_REDIS_URL=server.url,
            REDIS_URL=server.url,
            JOB_STORE_URL=server.url,
            EXPORTER_PORT=str(find_free_port()),
            WORKER_PASSWORD="example-password",
            PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
            PYTHONPATH=str(REPO_ROOT),
        )
        yield env


@pytest.fixture(scope="module")
def services(
    example_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[Path, list[subprocess.Popen[bytes]]]]:
    """Each document's background blocks, running; each must still run at the end."""
    started: dict[Path, list[tuple[CodeBlock, subprocess.Popen[bytes], Path]]] = {}
    for block in _runnable_blocks():
        if block.marker != "runs-in-background":
            continue
        directory = tmp_path_factory.mktemp("service")
        log = directory / "output.log"
        with log.open("wb") as output:
            process = subprocess.Popen(
                _command(block, directory),
                cwd=directory,
                env=example_env,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        started.setdefault(block.path, []).append((block, process, log))
    yield {path: [process for _, process, _ in entries] for path, entries in started.items()}
    crashed = []
    for entries in started.values():
        for block, process, log in entries:
            if process.poll() is not None:
                crashed.append(f"{block.name} exited {process.returncode}:\n{log.read_text()}")
                continue
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=BLOCK_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    assert not crashed, "\n".join(crashed)


@pytest.mark.parametrize("block", _params())
def test_block_runs_as_written(
    block: CodeBlock,
    example_env: dict[str, str],
    services: dict[Path, list[subprocess.Popen[bytes]]],
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        _command(block, tmp_path),
        cwd=tmp_path,
        env=example_env,
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT,
        check=False,
    )
    report = f"{block.name} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert done.returncode == 0, report
    if block.expected_output is not None:
        assert done.stdout == block.expected_output, report


def test_every_document_runs_its_blocks() -> None:
    """A skip always says why (the reader refuses a bare <!-- not-run -->), and no
    document is skipped whole: each runs at least one block."""
    blocks = _runnable_blocks()
    assert all(block.reason for block in blocks if block.marker == "not-run")
    run = {block.path for block in blocks if block.marker != "not-run"}
    assert run == set(DOCUMENTS)


def _command(block: CodeBlock, directory: Path) -> list[str]:
    if block.runs_as == "python":
        script = directory / "example.py"
        script.write_text(block.code, encoding="utf-8")
        return [sys.executable, str(script)]
    script = directory / "example.sh"
    script.write_text(block.code, encoding="utf-8")
    # -e and pipefail: any failing command of a multi-line block fails the block.
    return ["bash", "-e", "-o", "pipefail", str(script)]
