"""Monitoring commands: `generate` (a site's dashboards, alert rules and runbooks).

The generator (`platform_common.jobs_monitoring`, the `monitoring` extra) is imported
when the command runs, never at import: the core must not depend on it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from ..errors import ConfigurationError
from .exits import EXIT_USAGE, CliError, MissingExtra

__all__ = ["generate"]


def generate(
    out: Annotated[
        Path,
        typer.Option(
            "--out", file_okay=False, help="Root of the generated tree (e.g. this repository)."
        ),
    ],
    site: Annotated[
        Path | None,
        typer.Option(
            "--site",
            exists=True,
            dir_okay=False,
            help="Site settings YAML, overlaid on the defaults (site.defaults.yaml).",
        ),
    ] = None,
    check: Annotated[
        bool, typer.Option("--check", help="Write nothing; exit 1 if a file is stale.")
    ] = False,
) -> None:
    """Write (or --check) the monitoring bundle of a site: dashboards, alerts, runbooks.

    Needs the `monitoring` extra. The README's metric table is the repository's own
    `make generate`'s business, not this command's.
    """
    try:
        from platform_common.jobs_monitoring.generate import generate as generate_bundle
    except ImportError as exc:
        if (exc.name or "").startswith("platform_common"):
            raise  # our own module is broken: a bug, not a missing extra
        raise MissingExtra("generate", "monitoring", exc.name) from exc
    out = out.resolve()
    try:
        differing = generate_bundle(site, out, check)
    except ConfigurationError as exc:
        raise CliError(f"site settings: {exc}", EXIT_USAGE) from exc
    if check:
        for relative in differing:
            print(f"stale: {relative}", file=sys.stderr)
        if differing:
            raise CliError(
                f"{len(differing)} generated file(s) under {out} are stale; "
                "run without --check to rewrite them"
            )
    else:
        for relative in differing:
            print(f"{'wrote' if (out / relative).exists() else 'removed'} {relative}")
    if not differing:
        print(f"up to date: {out}")
