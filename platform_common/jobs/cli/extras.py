"""Entry points of the optional extras: a missing extra is one line and exit 2.

`queue-exporter` (the `exporter` extra) and `python -m platform_common.jobs_monitoring`
(the `monitoring` extra) import their third-party modules when their module is
imported, before any code of theirs could catch the failure; so their entry points
import that module through `run_with_extra`, which turns a missing module into the same
report `agentjobs` gives for its `cli` extra (`exits.MissingExtra`). Core only.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import cast

from .exits import MissingExtra

__all__ = ["run_with_extra"]

_OWN_PACKAGE = "platform_common"


def run_with_extra(target: str, *, extra: str, prog: str) -> int:
    """Import `target` ("pkg.module:function") and return what its function returns (it
    reads sys.argv itself). A module missing on the way is reported as `extra` not being
    installed: `error: ...` on stderr and exit 2. A module of this project missing is a
    bug, not a missing extra: that traceback is left as it is."""
    module_name, _, function = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        top_level = (exc.name or _OWN_PACKAGE).partition(".")[0]
        if top_level == _OWN_PACKAGE:
            raise
        missing = MissingExtra(prog, extra, top_level)
        print(f"error: {missing}", file=sys.stderr)
        return missing.exit_code
    return cast(Callable[[], int], getattr(module, function))()
