"""The operator entry point: `agentjobs <command>` or `python -m platform_common.jobs <command>`.

    worker     run a queue worker                  (core install; alias: -m ...jobs.worker)
    backfill   fill the JobStore time index
    acl        print the Redis ACL rules per role
    info       queue depths, workers and counters per agent type   (--watch to refresh)
    workers    each worker: id, host, last heartbeat, jobs running
    job show   one job: state, attempts, history, result
    job cancel cancel one job (a waiting one never starts, a running one is stopped)
    session cancel   cancel every unfinished job of a user session
    dead       list | show | requeue | purge dead letters (dry-run, confirmation, JSON)
    failed     the same for failed jobs (failed for good without a retry)
    pause      stop workers starting jobs of an agent type (running ones finish)
    resume     let them start its jobs again
    limits     show | set an agent type's rate, burst, caps and fair-share key (live)
    console    serve the queue console locally (read-only on 127.0.0.1 by default)
    deploy render   the workers' Kubernetes objects and a PrometheusRule (`monitoring` extra)
    slo        each agent type's SLOs, error budget left and burn rate, from Prometheus

`worker` runs with the core dependencies alone (deployments start workers without the
`cli` extra); the other commands are a typer app (`root`), one module per command
group, and need the `cli` extra (typer, rich). Exit statuses and the one-line failure
report: see `exits`.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from . import exits

__all__ = ["main"]

PROG = "agentjobs"
_CLI_MODULES = ("typer", "rich")


def main(argv: Sequence[str] | None = None, *, prog: str = PROG) -> int:
    """Run one command (`argv` defaults to sys.argv[1:]); returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    return exits.guarded(lambda: _dispatch(args, prog))


def _dispatch(args: list[str], prog: str) -> int:
    leading = 0
    while args[leading : leading + 1] == ["--debug"]:
        leading += 1
    if args[leading : leading + 1] == ["worker"]:
        # Straight to argparse, with or without typer installed: deployments (core only)
        # and development then run the worker through the very same code.
        if leading:
            exits.enable_debug()
        from . import worker_command

        return worker_command.run(args[leading + 1 :], f"{prog} worker")
    missing = _missing_cli_module()
    if missing is not None:
        return _without_cli_extra(args[leading:], prog, missing)
    from .root import run_app

    return run_app(args, prog)


def _missing_cli_module() -> str | None:
    for name in _CLI_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            return name
    return None


def _without_cli_extra(args: list[str], prog: str, missing: str) -> int:
    if args and args[0] not in ("--help", "-h"):
        raise exits.MissingExtra(args[0], "cli", missing)
    print(
        f"usage: {prog} worker --agent-type TYPE --handler pkg.module:func [options]\n"
        f"(`{prog} worker --help` for its options; the other commands need the 'cli' "
        "extra: pip install 'platform-common-jobs[cli]')",
        file=sys.stdout if args else sys.stderr,
    )
    return exits.EXIT_OK if args else exits.EXIT_USAGE
