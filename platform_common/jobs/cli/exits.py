"""Exit statuses and the one-line failure report every command shares (core only, no typer).

    0    done
    1    the command failed: Redis unreachable or refusing, stale generated files, a
         `backfill --verify` that found records without their index entry, a bug
    2    usage or configuration: a bad option, a ConfigurationError, a bad --handler,
         a missing extra
    130  interrupted (Ctrl-C before a worker installed its own signal handlers)

A failure is one line on stderr, `error: <what is wrong>`; `--debug` or
AGENTJOBS_DEBUG=1 prints the traceback before it. AGENTJOBS_* is this CLI's own
namespace, read strictly like the others: a misspelt name or a value that is not a
boolean is a configuration error (exit 2), never silently ignored.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable

from redis.exceptions import RedisError

from ..env import parse_bool, read_namespace
from ..errors import BackendUnavailable, ConfigurationError, JobsError, ValidationError

__all__ = [
    "DEBUG_ENV",
    "ENV_PREFIX",
    "ENV_VARIABLES",
    "EXIT_FAILURE",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "PROMETHEUS_URL_ENV",
    "CliError",
    "MissingExtra",
    "describe",
    "enable_debug",
    "guarded",
]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

ENV_PREFIX = "AGENTJOBS_"
DEBUG_ENV = "AGENTJOBS_DEBUG"
PROMETHEUS_URL_ENV = "AGENTJOBS_PROMETHEUS_URL"
"""The Prometheus scraping the exporter (`info`, `console` and `slo` --prometheus-url)."""
ENV_VARIABLES = frozenset({DEBUG_ENV, PROMETHEUS_URL_ENV})
_DEBUG_HINT = f"--debug or {DEBUG_ENV}=1 shows the traceback"


class CliError(JobsError):
    """A command could not do what it was asked; `exit_code` is the status it ends with."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILURE) -> None:
        self.exit_code = exit_code
        super().__init__(message)


class MissingExtra(CliError):
    """A command needs an optional extra that is not installed; names the command, the
    extra and the module that failed to import."""

    def __init__(self, command: str, extra: str, module: str | None) -> None:
        self.command = command
        self.extra = extra
        self.module = module
        missing = f" (no module {module!r})" if module else ""
        super().__init__(
            f"`{command}` needs the {extra!r} extra{missing}: "
            f"pip install 'platform-common-jobs[{extra}]'",
            EXIT_USAGE,
        )


class _DebugFlag:
    # A flag rather than an argument: `--debug` is parsed deep inside typer or argparse,
    # while the report that reads it is made here, around the whole command.
    enabled = False


def enable_debug() -> None:
    """Show tracebacks for the rest of this command (its `--debug` option)."""
    _DebugFlag.enabled = True


def _read_environment() -> None:
    """Check AGENTJOBS_* before the command runs: `AGENTJOBS_DEBGU=1` or
    `AGENTJOBS_DEBUG=maybe` would otherwise leave the traceback off without a word."""
    variables = read_namespace(os.environ, ENV_PREFIX, ENV_VARIABLES)
    if DEBUG_ENV in variables and parse_bool(variables[DEBUG_ENV], DEBUG_ENV):
        _DebugFlag.enabled = True


def _one_line(text: str) -> str:
    # Some messages (YAML errors, exception groups) span lines; the report must not.
    return " ".join(text.split())


def describe(exc: Exception) -> tuple[int, str]:
    """The exit status and the one-line message for `exc`."""
    detail = _one_line(str(exc)) or type(exc).__name__
    if isinstance(exc, CliError):
        return exc.exit_code, detail
    if isinstance(exc, ConfigurationError | ValidationError):
        return EXIT_USAGE, detail
    if isinstance(exc, BackendUnavailable):  # before RedisError: BackendBusy is both
        return EXIT_FAILURE, f"backend unavailable: {detail}"
    if isinstance(exc, RedisError):
        return EXIT_FAILURE, f"Redis: {type(exc).__name__}: {detail}"
    if isinstance(exc, OSError):
        return EXIT_FAILURE, f"{type(exc).__name__}: {detail}"
    return EXIT_FAILURE, f"unexpected {type(exc).__name__}: {detail} ({_DEBUG_HINT})"


def guarded(command: Callable[[], int]) -> int:
    """Run `command` and return its exit status; a failure becomes one line on stderr."""
    _DebugFlag.enabled = False  # per command: an earlier in-process run's --debug is over
    try:
        _read_environment()
        return command()
    except SystemExit as exc:  # argparse and typer end with it (usage errors, --help)
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or EXIT_OK
        print(_one_line(str(exc.code)), file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        code, message = describe(exc)
        if _DebugFlag.enabled:
            traceback.print_exception(exc, file=sys.stderr)
        print(f"error: {message}", file=sys.stderr)
        return code
