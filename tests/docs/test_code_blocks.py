"""The markdown block reader of test_examples: markers are honoured or refused, never ignored."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.code_blocks import MarkerError, code_blocks


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "doc.md"
    path.write_text(text, encoding="utf-8")
    return path


def test_blocks_carry_their_marker_and_expected_output(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "<!-- not-run: needs a cluster -->\n```sh\nkubectl get pods\n```\n\n"
        "```python\nprint(1)\n```\n<!-- output -->\n```text\n1\n```\n\n"
        "<!-- runs-in-background -->\n```sh\nqueue-exporter\n```\n```json\n{}\n```\n",
    )
    skipped, printed, service, data = code_blocks(path)
    assert (skipped.marker, skipped.reason, skipped.runs_as) == ("not-run", "needs a cluster", "sh")
    assert (printed.runs_as, printed.code, printed.expected_output) == (
        "python",
        "print(1)\n",
        "1\n",
    )
    assert (service.marker, service.line) == ("runs-in-background", 15)
    assert data.runs_as is None


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("<!-- not-run -->\n```sh\nls\n```\n", "needs its reason"),
        ("<!-- not-run:   -->\n```sh\nls\n```\n", "needs its reason"),
        ("<!-- skip: later -->\n```sh\nls\n```\n", "unknown marker 'skip'"),
        ("<!-- output -->\n```text\n1\n```\n", "follows no runnable block"),
    ],
)
def test_a_marker_the_test_cannot_honour_is_refused(
    tmp_path: Path, text: str, problem: str
) -> None:
    with pytest.raises(MarkerError, match=problem):
        code_blocks(_write(tmp_path, text))
