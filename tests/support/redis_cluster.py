"""Start a real Redis Cluster (3 masters, 1 replica each) on free ports, for tests.

Six `redis-server --cluster-enabled yes` processes are joined with
`redis-cli --cluster create ... --cluster-replicas 1`. A short node timeout keeps a
failover (master killed, replica promoted) to a few seconds, and
`cluster-replica-validity-factor 0` lets a replica take over however long it has
been disconnected, so a test that kills a master always gets a promotion.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .redis_server import RedisServer, find_free_port

__all__ = ["ClusterNodeInfo", "RedisClusterNodes"]

NODE_TIMEOUT_MS = 1000


@dataclass(frozen=True, slots=True)
class ClusterNodeInfo:
    """One line of CLUSTER NODES, as far as tests care."""

    node_id: str
    port: int
    is_master: bool
    master_id: str | None
    failed: bool
    slots: tuple[str, ...]


class RedisClusterNodes:
    """A 3-master / 3-replica cluster of `RedisServer` children.

    `url` is `redis://127.0.0.1:<p1>,127.0.0.1:<p2>,.../0?cluster=true`: every node is
    a startup node, so a client made after a master died still finds the cluster.
    """

    def __init__(
        self,
        *,
        masters: int = 3,
        replicas_per_master: int = 1,
        appendonly: bool = False,
        appendfsync: str = "everysec",
        node_timeout_ms: int = NODE_TIMEOUT_MS,
    ) -> None:
        self.masters = masters
        self.replicas_per_master = replicas_per_master
        self.directory = Path(tempfile.mkdtemp(prefix="pcj-cluster-"))
        count = masters * (1 + replicas_per_master)
        self.nodes: list[RedisServer] = []
        for index in range(count):
            node_dir = self.directory / f"node{index}"
            node_dir.mkdir()
            self.nodes.append(
                RedisServer(
                    appendonly=appendonly,
                    appendfsync=appendfsync,
                    directory=str(node_dir),
                    extra_args=(
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes.conf",
                        # An explicit bus port: the default (port + 10000) is often
                        # taken, or out of range, for an ephemeral data port.
                        "--cluster-port",
                        str(find_free_port()),
                        "--cluster-node-timeout",
                        str(node_timeout_ms),
                        "--cluster-replica-validity-factor",
                        "0",
                        # Workers must keep consuming while a slot range is failing over
                        # elsewhere: one dead shard must not stop the other two.
                        "--cluster-require-full-coverage",
                        "no",
                        # A replica's full sync starts at once: a master otherwise waits
                        # 5 s for more replicas to share a diskless transfer with, at the
                        # cluster's start and whenever a killed node rejoins.
                        "--repl-diskless-sync-delay",
                        "0",
                    ),
                )
            )

    # -- lifecycle ---------------------------------------------------------
    def start(self, timeout: float = 60.0) -> RedisClusterNodes:
        try:
            self._create(timeout)
        except BaseException:
            self.cleanup()  # the nodes already started must not outlive the failure
            raise
        return self

    def _create(self, timeout: float) -> None:
        for node in self.nodes:
            node.start()
        addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
        created = subprocess.run(
            [
                "redis-cli",
                "--cluster",
                "create",
                *addresses,
                "--cluster-replicas",
                str(self.replicas_per_master),
                "--cluster-yes",
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if created.returncode != 0 or "[OK] All 16384 slots covered" not in created.stdout:
            raise RuntimeError(f"redis-cli --cluster create failed:\n{created.stdout[-3000:]}")
        self.wait_healthy(timeout)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def cleanup(self) -> None:
        for node in self.nodes:
            node.cleanup()
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> RedisClusterNodes:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    # -- addresses ---------------------------------------------------------
    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)
        return f"redis://{hosts}/0?cluster=true"

    def running(self) -> list[RedisServer]:
        return [node for node in self.nodes if node.process is not None]

    def node_by_port(self, port: int) -> RedisServer:
        for node in self.nodes:
            if node.port == port:
                return node
        raise KeyError(port)

    # -- topology ----------------------------------------------------------
    def topology(self) -> list[ClusterNodeInfo]:
        """CLUSTER NODES as seen by the first running node."""
        for node in self.running():
            text = node.command("CLUSTER", "NODES")
            if text:
                return _parse_cluster_nodes(text)
        raise RuntimeError("no cluster node is running")

    def master_ports(self) -> list[int]:
        return sorted(info.port for info in self.topology() if info.is_master and not info.failed)

    def master_for_key(self, key: str) -> RedisServer:
        """The master that currently serves `key`'s slot."""
        node = self.running()[0]
        slot = int(node.command("CLUSTER", "KEYSLOT", key))
        for info in self.topology():
            if info.is_master and not info.failed and _slot_in(slot, info.slots):
                return self.node_by_port(info.port)
        raise RuntimeError(f"no master serves slot {slot}")

    def replica_of(self, master: RedisServer) -> RedisServer:
        topology = self.topology()
        master_id = next(info.node_id for info in topology if info.port == master.port)
        for info in topology:
            if info.master_id == master_id and not info.failed:
                return self.node_by_port(info.port)
        raise RuntimeError(f"master {master.port} has no live replica")

    def wait_replicated(self, master: RedisServer, timeout: float = 30.0) -> None:
        """Poll until `master`'s replica applied everything it was sent, so a kill of the
        master right after loses no acknowledged write (replication is asynchronous)."""
        replica = self.replica_of(master)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            sent = _info_field(master.command("INFO", "replication"), "master_repl_offset")
            applied = _info_field(replica.command("INFO", "replication"), "slave_repl_offset")
            if sent is not None and sent == applied:
                return
            time.sleep(0.02)
        raise RuntimeError(f"replica {replica.port} did not catch up within {timeout}s")

    # -- failures ----------------------------------------------------------
    def kill_master(self, master: RedisServer, timeout: float = 30.0) -> RedisServer:
        """SIGKILL `master` and wait until its replica is promoted and every surviving
        node reports cluster_state:ok. Returns the new master."""
        replica = self.replica_of(master)
        master.kill()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "role:master" in replica.command("INFO", "replication"):
                break
            time.sleep(0.05)
        else:
            raise RuntimeError(f"replica {replica.port} was not promoted within {timeout}s")
        self.wait_healthy(max(1.0, deadline - time.monotonic()))
        return replica

    def restart_node(self, node: RedisServer, timeout: float = 30.0) -> None:
        """Bring a killed node back; it rejoins (as a replica of whoever took over)."""
        node.start()
        self.wait_healthy(timeout)

    def wait_healthy(self, timeout: float = 30.0) -> None:
        """Poll until every running node says cluster_state:ok, knows every node, and
        every replica's link to its master is up."""
        deadline = time.monotonic() + timeout
        problem: str | None = "not checked yet"
        while time.monotonic() < deadline:
            problem = self._health_problem()
            if problem is None:
                return
            time.sleep(0.05)
        raise RuntimeError(f"cluster not healthy within {timeout}s: {problem}")

    def _health_problem(self) -> str | None:
        expected = len(self.nodes)
        for node in self.running():
            info = node.command("CLUSTER", "INFO")
            if "cluster_state:ok" not in info:
                return f"{node.port}: {info.splitlines()[:1]}"
            if f"cluster_known_nodes:{expected}" not in info:
                return f"{node.port} does not know all {expected} nodes yet"
            replication = node.command("INFO", "replication")
            if "role:slave" in replication and "master_link_status:up" not in replication:
                return f"replica {node.port} is not linked to its master"
        return None


def _parse_cluster_nodes(text: str) -> list[ClusterNodeInfo]:
    # <id> <ip:port@cport> <flags> <master> <ping-sent> <pong-recv> <epoch> <link> <slot>...
    nodes = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 8:
            continue
        flags = fields[2].split(",")
        port = int(fields[1].split("@")[0].rsplit(":", 1)[1])
        nodes.append(
            ClusterNodeInfo(
                node_id=fields[0],
                port=port,
                is_master="master" in flags,
                master_id=None if fields[3] == "-" else fields[3],
                failed="fail" in flags or "fail?" in flags,
                slots=tuple(fields[8:]),
            )
        )
    return nodes


def _info_field(text: str, name: str) -> str | None:
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key == name:
            return value.strip()
    return None


def _slot_in(slot: int, ranges: tuple[str, ...]) -> bool:
    for item in ranges:
        if item.startswith("["):  # a slot being migrated: "[slot->-node]"
            continue
        low, _, high = item.partition("-")
        if int(low) <= slot <= int(high or low):
            return True
    return False
