"""`queue-exporter`, the console script: the exporter (`__main__.main`), or without the
`exporter` extra one line naming it and exit 2 (`python -m` comes here too)."""

from __future__ import annotations

from platform_common.jobs.cli.extras import run_with_extra

__all__ = ["PROG", "main"]

PROG = "queue-exporter"


def main() -> int:
    """Run the exporter with sys.argv; its exit status."""
    return run_with_extra(
        "platform_common.jobs_exporter.__main__:main", extra="exporter", prog=PROG
    )
