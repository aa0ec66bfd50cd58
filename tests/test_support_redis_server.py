"""The suite's own server helper (tests/support/redis_server.py, ports.py): a server that
does not come up is not left running, ports are never handed out twice, and the Valkey
flavour is the pinned valkey-server."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.backends import VALKEY, check_valkey_markers
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


def test_the_valkey_flavour_is_the_pinned_valkey_server(valkey_server: RedisServer) -> None:
    # The second server family really is Valkey, of the version the README states.
    info = valkey_server.command("INFO", "server")
    assert "server_name:valkey" in info and "valkey_version:8.1." in info, info
    assert valkey_server.command("PING") == "PONG"


def test_a_valkey_marker_on_a_test_that_reaches_no_server_is_refused() -> None:
    class Item:
        nodeid = "tests/x.py::test_x"
        fixturenames = ("tmp_path",)

        def get_closest_marker(self, name: str) -> object:
            return object() if name == VALKEY else None

    with pytest.raises(pytest.UsageError, match="marked valkey but uses no backend fixture"):
        check_valkey_markers([Item()])  # type: ignore[list-item]
    Item.fixturenames = ("redis_url",)
    check_valkey_markers([Item()])  # type: ignore[list-item]
