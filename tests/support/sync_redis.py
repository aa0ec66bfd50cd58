"""Typed replies of redis-py's synchronous clients.

redis-py types every command of its one class hierarchy (sync and asyncio alike) as
returning `Awaitable[T] | T`. A synchronous client's reply is never awaitable:
`sync_reply` checks that and gives the checker the `T`."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["sync_reply"]

T = TypeVar("T")


def sync_reply(reply: Awaitable[T] | T) -> T:
    """`reply`, which must come from a synchronous client."""
    assert not isinstance(reply, Awaitable), "an asyncio client's reply: await it instead"
    return reply
