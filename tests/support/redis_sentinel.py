"""Start a master, a replica and three `redis-sentinel` processes on free ports, for tests.

Timeouts are short (down-after 1 s) so a failover, forced with SENTINEL FAILOVER or
caused by killing the master, completes in a few seconds. `url` is the
`redis+sentinel://` form that `RedisSettings.from_url` understands.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from .redis_server import RedisServer, find_free_port

__all__ = ["RedisSentinelGroup"]

SERVICE_NAME = "pcj-master"
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 5000


class RedisSentinelGroup:
    """One monitored master with one replica, watched by `sentinels` sentinels
    (quorum: a majority)."""

    def __init__(
        self,
        *,
        sentinels: int = 3,
        service_name: str = SERVICE_NAME,
        appendonly: bool = False,
        appendfsync: str = "everysec",
    ) -> None:
        self.service_name = service_name
        self.quorum = sentinels // 2 + 1
        self.directory = Path(tempfile.mkdtemp(prefix="pcj-sentinel-"))
        self.servers: list[RedisServer] = []
        for name in ("a", "b"):
            node_dir = self.directory / f"redis-{name}"
            node_dir.mkdir()
            self.servers.append(
                RedisServer(
                    appendonly=appendonly,
                    appendfsync=appendfsync,
                    directory=str(node_dir),
                    # A replica's full sync starts at once: a master otherwise waits 5 s
                    # for more replicas to share a diskless transfer with.
                    extra_args=["--repl-diskless-sync-delay", "0"],
                )
            )
        # The second server starts as a replica of the first.
        self.servers[1].extra_args += ["--replicaof", "127.0.0.1", str(self.servers[0].port)]
        self.sentinel_ports = [find_free_port() for _ in range(sentinels)]
        self._sentinel_processes: dict[int, subprocess.Popen[bytes]] = {}

    # -- lifecycle ---------------------------------------------------------
    def start(self, timeout: float = 30.0) -> RedisSentinelGroup:
        try:
            for server in self.servers:
                server.start()
            for port in self.sentinel_ports:
                self._start_sentinel(port)
            self.wait_ready(timeout)
        except BaseException:
            self.cleanup()  # the processes already started must not outlive the failure
            raise
        return self

    def cleanup(self) -> None:
        for process in self._sentinel_processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        self._sentinel_processes.clear()
        for server in self.servers:
            server.cleanup()
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> RedisSentinelGroup:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    # -- addresses ---------------------------------------------------------
    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{self.service_name}/0"

    def master(self) -> RedisServer:
        """The server the sentinels currently name as master."""
        port = self.master_port()
        return next(server for server in self.servers if server.port == port)

    def replica(self) -> RedisServer:
        port = self.master_port()
        return next(server for server in self.servers if server.port != port)

    def master_port(self) -> int:
        """The master's port according to the first sentinel that answers."""
        for port in self.sentinel_ports:
            answer = self.sentinel_cli(
                port, "SENTINEL", "get-master-addr-by-name", self.service_name
            )
            lines = answer.splitlines()
            if len(lines) == 2 and lines[1].isdigit():
                return int(lines[1])
        raise RuntimeError("no sentinel names a master")

    def sentinel_cli(self, port: int, *command: str) -> str:
        out = subprocess.run(
            ["redis-cli", "-p", str(port), *command], capture_output=True, text=True, timeout=30
        )
        return out.stdout.strip()

    # -- failover ----------------------------------------------------------
    def failover(self, timeout: float = 30.0) -> RedisServer:
        """A planned switchover that loses no acknowledged write; returns the new master.

        SENTINEL FAILOVER alone promotes the replica but leaves the old master
        accepting writes on its open connections until the sentinels demote it (about
        10 s later), and those writes vanish when it resyncs. So: pause writes on the
        old master, let the replica catch up, fail over, demote the old master at once,
        then unpause; the paused writes then meet READONLY and redis-py's sentinel
        connection reconnects to the new master.
        """
        old = self.master()
        new = self.replica()
        old.cli("CLIENT", "PAUSE", str(int(timeout * 1000)), "WRITE")
        try:
            self.wait_replicated(timeout)
            answer = self.sentinel_cli(
                self.sentinel_ports[0], "SENTINEL", "FAILOVER", self.service_name
            )
            if answer != "OK":
                raise RuntimeError(f"SENTINEL FAILOVER refused: {answer}")
            self._wait_promoted(old, timeout)
            old.cli("REPLICAOF", "127.0.0.1", str(new.port))
        finally:
            old.cli("CLIENT", "UNPAUSE")
        deadline = time.monotonic() + timeout
        while not _is_linked_replica(old):
            if time.monotonic() > deadline:
                raise RuntimeError(f"old master {old.port} did not follow {new.port}")
            time.sleep(0.05)
        return new

    def kill_master(self, timeout: float = 30.0) -> RedisServer:
        """SIGKILL the master; returns the replica once the sentinels promoted it."""
        old = self.master()
        old.kill()
        return self._wait_promoted(old, timeout)

    def restart_old_master(self, server: RedisServer, timeout: float = 30.0) -> None:
        """Start a killed master again as a replica of the current master.

        It is started with --replicaof, as an operator would, instead of waiting for
        the sentinels to notice it and convert it: that can take many seconds on a
        loaded machine, and the result is the same topology."""
        current = next(other for other in self.servers if other is not server)
        args = server.extra_args
        while "--replicaof" in args:
            at = args.index("--replicaof")
            del args[at : at + 3]
        args += ["--replicaof", "127.0.0.1", str(current.port)]
        server.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if _is_linked_replica(server):
                return
            time.sleep(0.05)
        raise RuntimeError(f"{server.port} did not rejoin as a replica within {timeout}s")

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Poll until every sentinel sees the master, its replica and the other
        sentinels: only then can they agree on a failover."""
        deadline = time.monotonic() + timeout
        others = len(self.sentinel_ports) - 1
        problem = "not checked yet"
        while time.monotonic() < deadline:
            problem = ""
            for port in self.sentinel_ports:
                state = _pairs(self.sentinel_cli(port, "SENTINEL", "MASTER", self.service_name))
                if state.get("num-slaves") != "1":
                    problem = f"sentinel {port} sees {state.get('num-slaves')} replicas"
                elif state.get("num-other-sentinels") != str(others):
                    problem = f"sentinel {port} sees {state.get('num-other-sentinels')} peers"
                elif "s_down" in state.get("flags", "") or "o_down" in state.get("flags", ""):
                    problem = f"sentinel {port} flags the master {state['flags']}"
                if problem:
                    break
            if not problem and _is_linked_replica(self.replica()):
                return
            time.sleep(0.05)
        raise RuntimeError(f"sentinels not ready within {timeout}s: {problem}")

    # -- internals ---------------------------------------------------------
    def _start_sentinel(self, port: int) -> None:
        directory = self.directory / f"sentinel-{port}"
        directory.mkdir(exist_ok=True)
        config = directory / "sentinel.conf"
        master_port = self.servers[0].port
        config.write_text(
            f"port {port}\n"
            "bind 127.0.0.1\n"
            f"dir {directory}\n"
            f"logfile {directory / 'sentinel.log'}\n"
            f"sentinel monitor {self.service_name} 127.0.0.1 {master_port} {self.quorum}\n"
            f"sentinel down-after-milliseconds {self.service_name} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {self.service_name} {FAILOVER_TIMEOUT_MS}\n"
            f"sentinel parallel-syncs {self.service_name} 1\n"
        )
        binary = shutil.which("redis-sentinel")
        if binary is None:
            raise RuntimeError("redis-sentinel is not installed: apt-get install redis-sentinel")
        process = subprocess.Popen(
            [binary, str(config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._sentinel_processes[port] = process
        deadline = time.monotonic() + 10
        while "PONG" not in self.sentinel_cli(port, "PING"):
            if process.poll() is not None or time.monotonic() > deadline:
                log = (directory / "sentinel.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"redis-sentinel on {port} did not start:\n{log}")
            time.sleep(0.02)

    def wait_replicated(self, timeout: float = 30.0) -> None:
        """Poll until the replica has applied everything the master has sent (so a
        kill of the master right after loses no acknowledged write)."""
        master, replica = self.master(), self.replica()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            sent = _pairs_colon(master.cli("INFO", "replication")).get("master_repl_offset")
            applied = _pairs_colon(replica.cli("INFO", "replication")).get("slave_repl_offset")
            if sent is not None and sent == applied:
                return
            time.sleep(0.02)
        raise RuntimeError(f"replica {replica.port} did not catch up within {timeout}s")

    def _wait_promoted(self, old: RedisServer, timeout: float) -> RedisServer:
        new = next(server for server in self.servers if server is not old)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            named = all(
                self.sentinel_cli(
                    p, "SENTINEL", "get-master-addr-by-name", self.service_name
                ).splitlines()[-1:]
                == [str(new.port)]
                for p in self.sentinel_ports
            )
            promoted = "role:master" in new.cli("INFO", "replication")
            if named and promoted:
                return new
            time.sleep(0.05)
        raise RuntimeError(f"{new.port} was not promoted within {timeout}s")


def _pairs(text: str) -> dict[str, str]:
    # redis-cli prints a flat reply one element per line: key, value, key, value...
    lines = text.splitlines()
    return dict(zip(lines[0::2], lines[1::2], strict=False))


def _pairs_colon(text: str) -> dict[str, str]:
    # INFO sections: "key:value" lines.
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def _is_linked_replica(server: RedisServer) -> bool:
    replication = server.cli("INFO", "replication")
    return "role:slave" in replication and "master_link_status:up" in replication
