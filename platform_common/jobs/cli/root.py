"""The typer app: the root `--debug` option and the commands, one module per command group.

A later command group (e.g. `dead`) is a `typer.Typer()` in its own module, added here
with `app.add_typer(module.app, name="dead")`.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from typer.core import TyperOption

from . import (
    acl_command,
    cancel_command,
    console_command,
    dead_command,
    deploy_command,
    info_command,
    job_command,
    limits_command,
    pause_command,
    slo_command,
    store_commands,
    worker_command,
    workers_command,
)
from .exits import EXIT_OK, enable_debug

__all__ = ["app", "run_app"]


def _show_flags_bare() -> None:
    """`--debug`, not `--debug <bool>`: typer's rich help gives every option its type, a
    flag's too, as if it took a value (its plain help leaves a flag's type out)."""
    shown = TyperOption.display_type_rich

    def display_type_rich(self: TyperOption, ctx: Any) -> str | None:
        return None if self.is_flag else shown(self, ctx)

    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_show_flags_bare()  # once, on import: each call would wrap the previous one

app = typer.Typer(
    help="Operate the agent job queue and JobStore.",
    no_args_is_help=True,
    add_completion=False,
    # Failures are reported in one line by `exits.guarded`, never as typer's tracebacks.
    pretty_exceptions_enable=False,
)


@app.callback()
def _root(
    debug: Annotated[
        bool, typer.Option("--debug", help="Print the traceback of a failure too.")
    ] = False,
) -> None:
    """Operate the agent job queue and JobStore.

    Exit status: 0 done, 1 failed, 2 usage or configuration error, 130 interrupted.
    AGENTJOBS_DEBUG=1 is the same as --debug.
    """
    if debug:
        enable_debug()


@app.command(
    "worker",
    help=f"{worker_command.SUMMARY} Options: `worker --help`.",
    # The worker's options belong to its argparse parser (it must run without typer), and
    # `cli.main` sends `worker` there before typer is imported. This entry lists it in
    # --help and forwards everything after `worker`, --help included, untouched.
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
def _worker(ctx: typer.Context) -> None:
    raise typer.Exit(worker_command.run(ctx.args, ctx.command_path))


app.command("backfill")(store_commands.backfill)
app.command("acl")(acl_command.acl)
app.command("info", help=info_command.HELP)(info_command.info)
app.command("workers", help=workers_command.HELP)(workers_command.workers)
job_command.app.command("cancel", help=cancel_command.CANCEL_HELP)(cancel_command.cancel_job)
app.add_typer(job_command.app, name="job")
app.add_typer(cancel_command.session_app, name="session")
app.add_typer(dead_command.app, name="dead")
app.add_typer(dead_command.failed_app, name="failed")
app.command("pause", help=pause_command.PAUSE_HELP)(pause_command.pause)
app.command("resume", help=pause_command.RESUME_HELP)(pause_command.resume)
app.add_typer(limits_command.app, name="limits")
app.command("console", help=console_command.HELP)(console_command.console)
app.add_typer(deploy_command.app, name="deploy")
app.command("slo", help=slo_command.HELP)(slo_command.slo)


def run_app(args: list[str], prog: str) -> int:
    """Run the app on `args`; typer reports usage errors itself (status 2)."""
    # get_command(...).main rather than app(): app() installs typer's excepthook, which
    # would outlive this call in a process that runs commands in-process (the tests).
    typer.main.get_command(app).main(args=args, prog_name=prog)
    return EXIT_OK  # not reached: in standalone mode main() always ends with SystemExit
