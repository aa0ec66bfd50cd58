"""The Host names the standalone console answers to, and the ASGI wrapper that refuses
every other one.

A page of another site can make its own name resolve to the console's address (DNS
rebinding) and then read the console as its own origin; the browser still sends that
name as the Host header, so a console answering only the names it was started for
serves such a page nothing."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["LOOPBACK_NAMES", "AllowedHosts", "allowed_host", "host_name", "served_hosts"]

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
_WILDCARDS = ("0.0.0.0", "::")
_DNS_NAME = re.compile(
    r"(?=.{1,253}$)([a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?)(\.[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?)*"
)


def host_name(value: str) -> str:
    """A Host header's name, lowercased, without its port, brackets or final dot."""
    value = value.strip().lower()
    if value.startswith("["):  # [IPv6]:port
        value = value[1:].partition("]")[0]
    elif value.count(":") == 1:
        value = value.partition(":")[0]
    try:  # one spelling of each address, as served_hosts holds it
        return str(ipaddress.ip_address(value))
    except ValueError:
        return value.rstrip(".")


def allowed_host(value: str) -> str:
    """An --allowed-host value as the console compares it: a DNS name or an IP address,
    without scheme or port; ValueError naming what is wrong."""
    name = value.strip().lower().rstrip(".")
    bare = name[1:-1] if name.startswith("[") and name.endswith("]") else name
    try:
        return str(ipaddress.ip_address(bare))
    except ValueError:
        pass
    if not _DNS_NAME.fullmatch(name):
        raise ValueError(
            f"--allowed-host {value!r}: a host name or IP address without scheme or "
            "port, e.g. console.internal"
        )
    return name


def served_hosts(bind: str, allowed: Iterable[str]) -> frozenset[str]:
    """The names a console bound to `bind` answers to: that address (and the loopback
    names when it is loopback or every address), plus `allowed`."""
    names = {allowed_host(name) for name in allowed}
    try:
        address = ipaddress.ip_address(bind)
    except ValueError:  # a name, e.g. localhost
        names.add(bind.lower().rstrip("."))
        if bind.lower().rstrip(".") == "localhost":
            names.update(LOOPBACK_NAMES)
        return frozenset(names)
    if address.is_loopback or bind in _WILDCARDS:
        names.update(LOOPBACK_NAMES)
    if bind not in _WILDCARDS:
        names.add(str(address))
    return frozenset(names)


class AllowedHosts:
    """Answers a request whose Host is not one of `hosts` with 400, before the app."""

    def __init__(self, app: ASGIApp, hosts: frozenset[str]) -> None:
        self._app = app
        self._hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self._app(scope, receive, send)
            return
        header = Headers(scope=scope).get("host", "")
        name = host_name(header)
        if name in self._hosts:
            await self._app(scope, receive, send)
            return
        if scope["type"] == "websocket":  # the console has none: closed, never served
            await send({"type": "websocket.close", "code": 1008})
            return
        body = (
            f"400: this console does not answer to the host {header!r}; if that is the "
            f"name a proxy forwards, start it with --allowed-host {name}\n"
            if name
            else "400: a request without a Host header\n"
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 400,
                "headers": [
                    (b"content-type", b"text/plain; charset=utf-8"),
                    (b"content-length", str(len(body)).encode()),
                    (b"x-content-type-options", b"nosniff"),
                    (b"cache-control", b"no-store"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
