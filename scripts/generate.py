"""Writes every generated file (dashboards, alert rules, runbooks, the metric and
settings tables of docs/reference.md) for a site's settings; with --check, writes
nothing and fails when any file differs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from platform_common.jobs.errors import ConfigurationError
from platform_common.jobs_exporter.metric_table import render_metric_table
from platform_common.jobs_monitoring.generate import generate, sync
from platform_common.jobs_monitoring.settings_table import render_settings_table
from platform_common.jobs_monitoring.site import DEFAULTS_FILE

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = "docs/reference.md"
# Each generated block of the reference page: its marker name and renderer (<!-- name:start -->).
REFERENCE_BLOCKS = (
    ("metrics-table", render_metric_table),
    ("settings-table", render_settings_table),
)


def _reference_with_tables(current: str) -> str:
    for name, render in REFERENCE_BLOCKS:
        start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
        before, found, rest = current.partition(start)
        _, found_end, after = rest.partition(end)
        if not found or not found_end:
            raise SystemExit(f"{REFERENCE}: markers {start} / {end} not found")
        current = f"{before}{start}\n{render()}{end}{after}"
    return current


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--site",
        type=Path,
        help=f"site settings YAML, overlaid on the defaults ({DEFAULTS_FILE.name})",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT,
        help="root of the generated tree (default: this repository; docs/reference.md's tables "
        "are generated only there)",
    )
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    return parser


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    out: Path = args.out.resolve()
    try:
        differing = generate(args.site, out, args.check)
    except ConfigurationError as exc:
        print(f"site settings: {exc}", file=sys.stderr)
        return 2
    if out == ROOT:
        reference = (ROOT / REFERENCE).read_text(encoding="utf-8")
        differing += sync(ROOT, {REFERENCE: _reference_with_tables(reference)}, args.check)
    if args.check:
        for relative in differing:
            print(f"stale: {relative}", file=sys.stderr)
        if differing:
            print("run `make generate` and commit the result", file=sys.stderr)
            return 1
        return 0
    for relative in differing:
        print(f"{'wrote' if (out / relative).exists() else 'removed'} {relative}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
