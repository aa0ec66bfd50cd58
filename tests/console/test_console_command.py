"""`agentjobs console`: served standalone, read-only and on loopback unless told."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
import pytest

from platform_common.jobs.console.hosts import host_name, served_hosts
from platform_common.jobs.queue import JobQueue
from tests.cli.runner import one_error_line, run
from tests.console.conftest import csrf_token, make_dead_letters, served_console
from tests.support.redis_server import find_free_port


async def test_read_only_by_default(queue: JobQueue, redis_url: str, tmp_path: Path) -> None:
    [job_id] = await make_dead_letters(queue, ["a"])
    with served_console(redis_url, tmp_path) as base:
        async with httpx.AsyncClient(base_url=base) as client:
            page = await client.get("types/dining/dead")
            assert page.status_code == 200 and job_id in page.text
            assert 'name="do"' not in page.text and "read-only" in page.text
            refused = await client.post(
                "types/dining/dead/act",
                data={"do": "purge:selected", "ids": job_id, "count": "1", "csrf": "x"},
            )
    assert refused.status_code == 403
    assert await queue.dead_letters.count("dining") == 1
    assert "console (read-only): http://127.0.0.1:" in (tmp_path / "console.log").read_text()


async def test_read_write_offers_the_forms(queue: JobQueue, redis_url: str, tmp_path: Path) -> None:
    await make_dead_letters(queue, ["a"])
    with served_console(redis_url, tmp_path, "--read-write") as base:
        async with httpx.AsyncClient(base_url=base) as client:
            page = await client.get("types/dining/dead")
    assert csrf_token(page.text) and 'name="do"' in page.text


def test_a_link_that_is_not_a_web_address_is_a_usage_error() -> None:
    done = run("console", "--runbook-url", "javascript:alert(1)")
    assert done.returncode == 2
    assert "must be an http(s) URL" in one_error_line(done)


def test_help_lists_the_console() -> None:
    done = run("--help")
    assert done.returncode == 0 and "console" in done.stdout
    options = run("console", "--help")
    assert "--read-write" in options.stdout and "127.0.0.1" in options.stdout


async def test_it_answers_only_to_the_hosts_it_was_started_for(
    redis_url: str, tmp_path: Path
) -> None:
    with served_console(redis_url, tmp_path, "--allowed-host", "console.internal") as base:
        async with httpx.AsyncClient(base_url=base) as client:
            own = await client.get("")  # Host: 127.0.0.1:<port>, as started
            local = await client.get("", headers={"host": "localhost"})
            proxied = await client.get("", headers={"host": "Console.Internal:443"})
            rebound = await client.get("types/dining", headers={"host": "attacker.example"})
            rebound_post = await client.post(
                "types/dining/dead/act", headers={"host": "attacker.example:8090"}
            )
    assert own.status_code == local.status_code == proxied.status_code == 200
    assert "Queues" in proxied.text
    for refused in (rebound, rebound_post):
        assert refused.status_code == 400, refused.text
        assert refused.headers["content-type"].startswith("text/plain")
        assert "--allowed-host attacker.example" in refused.text
        assert "dining" not in refused.text  # nothing of the console's
    log = (tmp_path / "console.log").read_text()
    assert "(answers to Host 127.0.0.1, ::1, console.internal, localhost)" in log


async def test_a_form_from_another_origin_is_refused(
    queue: JobQueue, redis_url: str, tmp_path: Path
) -> None:
    [job_id] = await make_dead_letters(queue, ["a"])
    with served_console(redis_url, tmp_path, "--read-write") as base:
        async with httpx.AsyncClient(base_url=base) as client:
            page = await client.get("types/dining/dead")
            fields = {"csrf": csrf_token(page.text), "do": "purge:selected", "error": "",
                      "ids": job_id, "count": "1"}  # fmt: skip
            refused = await client.post(
                "types/dining/dead/act", data=fields,
                headers={"origin": "http://attacker.example"},
            )  # fmt: skip
            assert refused.status_code == 403 and "posted from another site" in refused.text
            assert await queue.dead_letters.count("dining") == 1
            done = await client.post(
                "types/dining/dead/act", data=fields, headers={"origin": base.rstrip("/")}
            )
    assert done.status_code == 200 and "Purged 1 of 1" in done.text
    assert await queue.dead_letters.count("dining") == 0


@pytest.mark.parametrize(
    ("host", "problem"),
    [
        ("256.1.1.1", "not an IP address or a name this machine resolves"),
        ("192.0.2.1", "not an address of this machine"),  # TEST-NET-1: nobody's
    ],
)
def test_a_host_it_cannot_serve_is_one_line_and_exit_2(
    redis_url: str, host: str, problem: str
) -> None:
    done = run("console", "--host", host, "--port", str(find_free_port()),
               "--redis-url", redis_url)  # fmt: skip
    line = one_error_line(done)
    assert done.returncode == 2, done.stderr
    assert f"--host {host!r}" in line and problem in line


def test_a_port_in_use_is_one_line_and_exit_1(redis_url: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run("console", "--port", str(port), "--redis-url", redis_url)
    line = one_error_line(done)
    assert done.returncode == 1, done.stderr
    assert f"cannot serve on 127.0.0.1 port {port}" in line


@pytest.mark.parametrize("value", ["http://console.internal", "console.internal:8090", "*.x"])
def test_an_allowed_host_that_is_not_a_name_is_a_usage_error(value: str) -> None:
    done = run("console", "--allowed-host", value)
    assert done.returncode == 2
    assert f"--allowed-host {value!r}: a host name or IP address" in one_error_line(done)


@pytest.mark.parametrize(
    ("bind", "allowed", "hosts"),
    [
        ("127.0.0.1", (), {"localhost", "127.0.0.1", "::1"}),
        ("localhost", (), {"localhost", "127.0.0.1", "::1"}),
        ("::1", (), {"localhost", "127.0.0.1", "::1"}),
        ("0.0.0.0", ("Queue.Example.", "[::2]"), {"localhost", "127.0.0.1", "::1",
                                                  "queue.example", "::2"}),
        ("10.1.2.3", (), {"10.1.2.3"}),
        ("console.internal", ("10.1.2.3",), {"console.internal", "10.1.2.3"}),
    ],
)  # fmt: skip
def test_the_hosts_a_console_answers_to(
    bind: str, allowed: tuple[str, ...], hosts: set[str]
) -> None:
    assert served_hosts(bind, allowed) == hosts


@pytest.mark.parametrize(
    ("header", "name"),
    [("127.0.0.1:8090", "127.0.0.1"), ("[::1]:8090", "::1"), ("[0:0::1]", "::1"),
     ("Console.Internal.:80", "console.internal"), ("", "")],
)  # fmt: skip
def test_a_host_header_is_read_as_its_name(header: str, name: str) -> None:
    assert host_name(header) == name
