"""Calls made close together in one process, run as one batch: a worker's completions
share one script call instead of one each."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

__all__ = ["Coalescer"]

Item = TypeVar("Item")
Result = TypeVar("Result")


class Coalescer(Generic[Item, Result]):
    """Runs `run(items)` for the items submitted close together: those submitted in the
    same turn of the event loop go out together, and so do those submitted while a batch
    is in flight (as the next one), at most `max_items` at once. A lone item waits one
    turn of the loop, no more.

    `run` returns one result per item, in order: a value, or an exception that is
    raised to that item's caller alone. An exception `run` raises goes to every caller
    of its batch. A caller cancelled before its batch went out is left out of it."""

    def __init__(
        self, run: Callable[[list[Item]], Awaitable[Sequence[Result | BaseException]]],
        max_items: int,
    ) -> None:  # fmt: skip
        if max_items < 1:
            raise ValueError(f"max_items must be >= 1, got {max_items!r}")
        self._run = run
        self._max_items = max_items
        self._pending: list[tuple[Item, asyncio.Future[Result]]] = []
        self._flusher: asyncio.Task[None] | None = None

    async def submit(self, item: Item) -> Result:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Result] = loop.create_future()
        self._pending.append((item, future))
        if self._flusher is None:
            # An empty context: the batch belongs to no one caller (nor to its trace).
            self._flusher = loop.create_task(self._flush(), context=contextvars.Context())
        return await future

    async def _flush(self) -> None:
        try:
            while self._pending:
                taken = self._pending[: self._max_items]
                del self._pending[: self._max_items]
                batch = [(item, future) for item, future in taken if not future.done()]
                if batch:
                    await self._run_batch(batch)
        finally:
            self._flusher = None

    async def _run_batch(self, batch: list[tuple[Item, asyncio.Future[Result]]]) -> None:
        try:
            results = await self._run([item for item, _ in batch])
        except Exception as exc:
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        except BaseException:  # cancelled (the loop is closing): so are its callers
            for _, future in batch:
                future.cancel()
            raise
        for (_, future), result in zip(batch, results, strict=True):
            if future.done():
                continue
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)
