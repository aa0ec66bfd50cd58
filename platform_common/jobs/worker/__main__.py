"""Alias of `python -m platform_common.jobs worker` (deployments run it by this name).

    python -m platform_common.jobs.worker --agent-type dining --handler pkg.module:func

Same options, behaviour and exit statuses; needs only the core install.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from ..cli import main as cli_main
from ..cli.worker_command import load_handler

__all__ = ["load_handler", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """The `worker` command with `argv` (default: sys.argv[1:]); returns the exit status."""
    args = sys.argv[1:] if argv is None else argv
    return cli_main(["worker", *args], prog="python -m platform_common.jobs")


if __name__ == "__main__":
    sys.exit(main())
