"""Our queue's side of the peers benchmark: runs run_ours() from bench/queue.py (main venv).

INTEGRATION POINT: bench/queue.py belongs to the queue's author. This module only
loads it and maps the dict that run_ours(redis_url, n) returns onto the columns of
the peers table; when that function or its keys change, OUR_KEYS is what to adapt.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from types import ModuleType
from typing import Any

import workload

ROOT = Path(__file__).resolve().parents[2]
QUEUE_BENCH = ROOT / "bench" / "queue.py"

# peers-table column -> key of run_ours()'s result, first one present wins.
OUR_KEYS: dict[str, tuple[str, ...]] = {
    "single": ("enqueue", "enqueue_single", "single"),
    "bulk": ("enqueue_many", "bulk"),
    "drain": ("drain", "drain_one_worker"),
}


def load_queue_bench() -> ModuleType:
    # Loaded by path under another name: as "queue" it would shadow the standard
    # library's queue module, and bench/ is not a package.
    spec = importlib.util.spec_from_file_location("bench_queue", QUEUE_BENCH)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {QUEUE_BENCH}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def our_version() -> str:
    try:
        release = version("platform-common-jobs")
    except PackageNotFoundError:
        release = "?"
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return f"{release} ({commit or 'no git'})"


def pick(result: dict[str, Any], column: str) -> float | None:
    for key in OUR_KEYS[column]:
        if key in result:
            return float(result[key])
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--n", type=int, default=20_000)
    args = parser.parse_args()
    info: dict[str, object] = {"library": "ours", "version": our_version()}
    if not QUEUE_BENCH.exists():
        workload.emit(**info, missing=f"{QUEUE_BENCH.relative_to(ROOT)} does not exist yet")
        return
    module = load_queue_bench()
    run_ours = getattr(module, "run_ours", None)
    if run_ours is None:
        workload.emit(**info, missing="bench/queue.py has no run_ours(redis_url, n)")
        return
    result: dict[str, Any] = run_ours(args.url, args.n)
    columns = {column: pick(result, column) for column in OUR_KEYS}
    if columns["single"] is None and columns["drain"] is None:
        workload.emit(**info, missing=f"run_ours returned unknown keys: {sorted(result)}")
        return
    workload.emit(
        **info,
        single=columns["single"],
        bulk=columns["bulk"],
        drain=columns["drain"],
        concurrency=str(result.get("concurrency", "?")),
        raw=result,
    )


if __name__ == "__main__":
    main()
