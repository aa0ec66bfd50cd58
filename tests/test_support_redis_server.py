"""The suite's own server helper (tests/support/redis_server.py, ports.py): a server that
does not come up is not left running, and ports are never handed out twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.ports import find_free_port
from tests.support.redis_server import RedisServer


def processes_started_in(directory: Path) -> list[int]:
    """Pids of live processes whose command line names `directory` (each server's own)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().split(") ", 1)[1][:1]
        except OSError:
            continue  # ended meanwhile
        if str(directory) in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


def test_a_server_that_does_not_answer_in_time_is_stopped() -> None:
    server = RedisServer()
    try:
        with pytest.raises(RuntimeError, match="did not listen"):
            server.start(timeout=0)  # the process runs; the wait gives up at once
        assert server.process is None
        assert processes_started_in(server.directory) == []
        assert server.start().command("PING") == "PONG"  # the same object starts again
    finally:
        server.cleanup()


def test_command_answers_as_text_and_empty_when_the_server_is_gone() -> None:
    server = RedisServer().start()
    try:
        assert server.command("SET", "k", "v") == "OK"
        assert server.command("RPUSH", "list", "a", "b") == "2"
        assert server.command("LRANGE", "list", "0", "-1") == "a\nb"
        assert "role:master" in server.command("INFO", "replication")
        server.kill()
        assert server.command("PING") == ""
    finally:
        server.cleanup()


def test_ports_are_not_handed_out_twice() -> None:
    ports = [find_free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
