"""The Coalescer: calls made close together run as one batch, each caller gets its own
result or error."""

from __future__ import annotations

import asyncio

import pytest

from platform_common.jobs.worker.coalescer import Coalescer


class Recorder:
    """A batch function that records its batches; `gate` holds a batch in flight."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.started = asyncio.Event()
        """Set when a batch is in flight."""
        self.gate = asyncio.Event()
        self.gate.set()

    async def run(self, items: list[int]) -> list[int | BaseException]:
        self.batches.append(items)
        self.started.set()
        await self.gate.wait()
        return [ValueError(item) if item < 0 else item * 10 for item in items]


async def test_calls_in_one_turn_of_the_loop_form_one_batch() -> None:
    recorder = Recorder()
    coalescer = Coalescer(recorder.run, max_items=10)
    assert await asyncio.gather(*(coalescer.submit(i) for i in range(5))) == [0, 10, 20, 30, 40]
    assert recorder.batches == [[0, 1, 2, 3, 4]]


async def test_calls_made_while_a_batch_is_in_flight_form_the_next() -> None:
    recorder = Recorder()
    recorder.gate.clear()
    coalescer = Coalescer(recorder.run, max_items=10)
    first = asyncio.ensure_future(coalescer.submit(1))
    await recorder.started.wait()
    later = [asyncio.ensure_future(coalescer.submit(i)) for i in (2, 3)]
    await asyncio.sleep(0)
    assert recorder.batches == [[1]]
    recorder.gate.set()
    assert await first == 10 and await asyncio.gather(*later) == [20, 30]
    assert recorder.batches == [[1], [2, 3]]


async def test_a_batch_holds_at_most_max_items() -> None:
    recorder = Recorder()
    coalescer = Coalescer(recorder.run, max_items=2)
    await asyncio.gather(*(coalescer.submit(i) for i in range(5)))
    assert recorder.batches == [[0, 1], [2, 3], [4]]


async def test_an_item_error_goes_to_its_caller_alone() -> None:
    coalescer = Coalescer(Recorder().run, max_items=10)
    outcomes = await asyncio.gather(
        coalescer.submit(1), coalescer.submit(-1), coalescer.submit(2), return_exceptions=True
    )
    assert outcomes[0] == 10 and outcomes[2] == 20
    assert isinstance(outcomes[1], ValueError)


async def test_an_error_of_the_whole_batch_goes_to_every_caller_of_it() -> None:
    async def broken(items: list[int]) -> list[int | BaseException]:
        raise ConnectionError("gone")

    coalescer = Coalescer(broken, max_items=10)
    outcomes = await asyncio.gather(
        coalescer.submit(1), coalescer.submit(2), return_exceptions=True
    )
    assert all(isinstance(outcome, ConnectionError) for outcome in outcomes)
    # The coalescer goes on serving after a failed batch.
    working = Coalescer(Recorder().run, max_items=10)
    assert await working.submit(3) == 30


async def test_a_caller_cancelled_before_its_batch_went_out_is_left_out() -> None:
    recorder = Recorder()
    recorder.gate.clear()
    coalescer = Coalescer(recorder.run, max_items=10)
    first = asyncio.ensure_future(coalescer.submit(1))
    await recorder.started.wait()
    dropped = asyncio.ensure_future(coalescer.submit(2))
    kept = asyncio.ensure_future(coalescer.submit(3))
    await asyncio.sleep(0)
    dropped.cancel()
    recorder.gate.set()
    assert await first == 10 and await kept == 30
    with pytest.raises(asyncio.CancelledError):
        await dropped
    assert recorder.batches == [[1], [3]]


def test_max_items_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_items"):
        Coalescer(Recorder().run, max_items=0)
