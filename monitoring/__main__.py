"""`python -m platform_common.jobs_monitoring --out DIR [--site FILE] [--check]`: write (or
check) a site's monitoring bundle: dashboards, alert rules, runbooks.

The generators' own entry point (the `monitoring` extra; the operator CLI's `deploy
render` imports the Kubernetes renderer alone). Exit status 0 done or up to date, 1
stale files on --check, 2 bad site settings.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

if __name__ == "__main__":
    # Run through `run_with_extra`, which imports this module again: a `monitoring`
    # extra missing below (yaml, grafanalib) is then one line, not a traceback.
    from platform_common.jobs.cli.extras import run_with_extra

    sys.exit(
        run_with_extra(
            "platform_common.jobs_monitoring.__main__:main",
            extra="monitoring",
            prog="python -m platform_common.jobs_monitoring",
        )
    )

from platform_common.jobs.errors import ConfigurationError

from .generate import generate
from .site import DEFAULTS_FILE


def main(argv: Sequence[str] | None = None) -> int:
    # argparse, not the CLI's typer: the `monitoring` extra installs no typer (a site
    # generating its bundle needs nothing of the operator CLI).
    parser = argparse.ArgumentParser(
        prog="python -m platform_common.jobs_monitoring", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--out", type=Path, required=True, help="root of the generated tree")
    parser.add_argument(
        "--site", type=Path, help=f"site settings YAML, overlaid on {DEFAULTS_FILE.name}"
    )
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    out: Path = args.out.resolve()
    try:
        differing = generate(args.site, out, args.check)
    except ConfigurationError as exc:
        print(f"error: site settings: {exc}", file=sys.stderr)
        return 2
    for relative in differing:
        if args.check:
            print(f"stale: {relative}", file=sys.stderr)
        else:
            print(f"{'wrote' if (out / relative).exists() else 'removed'} {relative}")
    if args.check and differing:
        print(f"error: {len(differing)} generated file(s) under {out} are stale", file=sys.stderr)
        return 1
    if not differing:
        print(f"up to date: {out}")
    return 0
