"""The fenced code blocks of a markdown file, with the marker comment written above each.

A marker is an HTML comment on the line right above the opening fence:
    <!-- not-run: why -->        the block is not executed; the reason is required
    <!-- runs-in-background -->  a service (a worker, the exporter): started before the
                                 file's other blocks run, stopped after them
    <!-- output -->              above a ```text block: the exact stdout of the block
                                 before it
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

__all__ = ["RUNNABLE_LANGUAGES", "CodeBlock", "MarkerError", "code_blocks"]

RUNNABLE_LANGUAGES = {"python": "python", "py": "python", "sh": "sh", "bash": "sh", "shell": "sh"}
"""Fence info string -> how the block runs; any other language is text, never run."""

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>```+)(?P<info>[^`]*)$")
_MARKER = re.compile(r"^\s*<!--\s*(?P<name>[a-z-]+)(?::(?P<argument>.*?))?\s*-->\s*$")
_MARKERS = {"not-run", "runs-in-background", "output"}


class MarkerError(ValueError):
    """A marker the test cannot honour: unknown, a skip without its reason, misplaced."""


@dataclass(frozen=True, slots=True)
class CodeBlock:
    path: Path
    line: int
    """1-based line of the opening fence."""
    language: str
    code: str
    marker: str | None = None
    reason: str = ""
    expected_output: str | None = None
    """The `<!-- output -->` block right after this one, if any."""

    @property
    def runs_as(self) -> str | None:
        """ "python" or "sh" if this block is executed, else None."""
        return RUNNABLE_LANGUAGES.get(self.language)

    @property
    def name(self) -> str:
        return f"{self.path.name}:{self.line}"


def code_blocks(path: Path) -> list[CodeBlock]:
    """Every fenced block of `path`, in order; `output` blocks attached to the one before."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[CodeBlock] = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        closing = index + 1
        while closing < len(lines) and lines[closing].strip() != opening["fence"]:
            closing += 1
        language = opening["info"].strip().split(" ")[0].lower()
        marker, reason = _marker_above(path, lines, index)
        code = "\n".join(
            line.removeprefix(opening["indent"]) for line in lines[index + 1 : closing]
        )
        block = CodeBlock(path, index + 1, language, code + "\n", marker, reason)
        if marker == "output":
            if not blocks or blocks[-1].runs_as is None:
                raise MarkerError(f"{block.name}: <!-- output --> follows no runnable block")
            blocks[-1] = replace(blocks[-1], expected_output=block.code)
        else:
            blocks.append(block)
        index = closing + 1
    return blocks


def _marker_above(path: Path, lines: list[str], fence_index: int) -> tuple[str | None, str]:
    if fence_index == 0:
        return None, ""
    found = _MARKER.match(lines[fence_index - 1])
    if found is None:
        return None, ""
    name, argument = found["name"], (found["argument"] or "").strip()
    where = f"{path.name}:{fence_index}"
    if name not in _MARKERS:
        raise MarkerError(f"{where}: unknown marker {name!r} (known: {sorted(_MARKERS)})")
    if name == "not-run" and not argument:
        raise MarkerError(f"{where}: <!-- not-run: ... --> needs its reason")
    return name, argument
