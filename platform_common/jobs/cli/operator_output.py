"""What the operator commands share: the --redis-url and --output options, the queue they
work on, JSON output, and how ages, times and untrusted text are drawn in rich tables."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import os
from collections.abc import Awaitable, Callable
from enum import StrEnum
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.text import Text

from ..operations import operator_queue
from ..operations.formatting import NONE, age, timestamp
from ..operations.stored import readable
from ..queue import JobQueue

__all__ = [
    "NONE",
    "Output",
    "OutputOption",
    "RedisUrlOption",
    "age",
    "command",
    "help_text",
    "jsonable",
    "print_json",
    "stdout",
    "text",
    "timestamp",
    "with_queue",
]

_T = TypeVar("_T")


class Output(StrEnum):
    TABLE = "table"
    JSON = "json"


RedisUrlOption = Annotated[
    str | None,
    typer.Option(
        "--redis-url",
        help="Overrides QUEUE_REDIS_URL / REDIS_URL. The other settings come from the "
        "worker's QUEUE_* variables (e.g. QUEUE_AGENT_TYPES, QUEUE_PREFIX).",
        show_default=False,
    ),
]
OutputOption = Annotated[
    Output,
    typer.Option("--output", "-o", help="table (for people) or json (for scripts)."),
]


def with_queue(redis_url: str | None, act: Callable[[JobQueue], Awaitable[_T]]) -> _T:
    """What `act` returns, run on the operator queue (opened, then closed)."""

    async def run() -> _T:
        async with operator_queue(redis_url) as queue:
            return await act(queue)

    return asyncio.run(run())


def help_text(doc: str | None) -> str:
    """A docstring as typer's rich help shows it well: each paragraph one line (rich
    wraps it to the terminal), paragraphs apart."""
    paragraphs = inspect.cleandoc(doc or "").split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paragraphs)


def command(
    app: typer.Typer, name: str, /, **words: str
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """`@app.command(name)` with the function's docstring as help_text, its {word}s filled
    in from `words` when given."""

    def register(function: Callable[..., None]) -> Callable[..., None]:
        doc = function.__doc__ or ""
        return app.command(name, help=help_text(doc.format(**words) if words else doc))(function)

    return register


PIPED_WIDTH = 200
"""Columns of a table written to a pipe or a file (no terminal to fit): wide enough that
no job id or agent type is cut to fit rich's default of 80."""


def stdout() -> Console:
    # No highlighting: numbers and ids keep one colour; markup is never read from data.
    console = Console(highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        return Console(highlight=False, width=PIPED_WIDTH)
    return console


def jsonable(value: Any) -> Any:
    """Dataclasses as dicts (nested ones too); tuples as lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


def print_json(value: Any, *, one_line: bool = False) -> None:
    """`value` as JSON on stdout: indented, or one line (a JSON-lines stream). A string
    holding bytes that are not UTF-8 (an id stored so) shows them as \\xNN."""
    # Plain print, not rich: scripts read it, and rich would wrap long lines.
    shown = _readable(jsonable(value))
    print(json.dumps(shown, indent=None if one_line else 2, ensure_ascii=False))


def text(value: object) -> Text:
    """Untrusted text (errors, payloads, ids) as a cell: `[red]` stays literal, bytes
    that are not UTF-8 (an id stored so) read \\xNN."""
    return Text(readable(str(value)))


def _readable(value: Any) -> Any:
    if isinstance(value, str):
        return readable(value)
    if isinstance(value, dict):
        return {_readable(k): _readable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_readable(v) for v in value]
    return value
