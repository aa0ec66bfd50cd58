"""Writes every generated file (dashboards, alert rules, runbooks, README metric table) for a
site's settings; with --check, writes nothing and fails when any file differs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from platform_common.jobs.errors import ConfigurationError
from platform_common.jobs_exporter.metric_table import render_metric_table
from platform_common.jobs_monitoring.generate import generate, sync
from platform_common.jobs_monitoring.site import DEFAULTS_FILE

ROOT = Path(__file__).resolve().parent.parent
README = "README.md"
TABLE_START, TABLE_END = "<!-- metrics-table:start -->", "<!-- metrics-table:end -->"


def _readme_with_table(current: str) -> str:
    before, found, rest = current.partition(TABLE_START)
    _, found_end, after = rest.partition(TABLE_END)
    if not found or not found_end:
        raise SystemExit(f"{README}: markers {TABLE_START} / {TABLE_END} not found")
    return f"{before}{TABLE_START}\n{render_metric_table()}{TABLE_END}{after}"


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
        help="root of the generated tree (default: this repository; the README's metric "
        "table is generated only there)",
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
        readme = (ROOT / README).read_text(encoding="utf-8")
        differing += sync(ROOT, {README: _readme_with_table(readme)}, args.check)
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
