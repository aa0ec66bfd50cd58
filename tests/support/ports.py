"""Free TCP ports for the servers the suite starts, safe across pytest-xdist workers.

A port from `bind(("127.0.0.1", 0))` lies in the kernel's ephemeral range: between the
moment it is chosen and the moment the server binds it, the kernel may give it to any
client socket, or to another worker's `bind(0)`. The ports handed out here lie below
that range, which the kernel never hands out by itself; each xdist worker draws from a
share of its own, so two workers never name the same port; and a process never hands
a port out twice, so a port named for a server not started yet (or for an address
meant to stay dead) is not given to another server meanwhile. Within a share the
choice is random: another test run on the machine draws from the same range.
"""

from __future__ import annotations

import os
import random
import socket
import threading
from pathlib import Path

__all__ = ["find_free_port"]

_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_SPAN = 10_000
"""How many ports below the ephemeral range the suite draws from (all workers)."""

_handed_out: set[int] = set()
_lock = threading.Lock()


def find_free_port() -> int:
    """A port nothing listens on now, not handed out before by this process."""
    share = _worker_share()
    choose = random.SystemRandom()
    with _lock:
        for _ in range(500):
            port = choose.choice(share)
            if port not in _handed_out and _bindable(port):
                _handed_out.add(port)
                return port
    raise RuntimeError(f"no free port in {share.start}-{share.stop - 1}")


def _worker_share() -> range:
    low = 32768
    if _EPHEMERAL_RANGE.exists():
        low = int(_EPHEMERAL_RANGE.read_text().split()[0])
    start = max(1024, low - _SPAN)
    # pytest-xdist names its workers gw0, gw1, ... and tells each how many there are.
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    index = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    size = (low - start) // workers
    return range(start + index * size, start + (index + 1) * size)


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True
