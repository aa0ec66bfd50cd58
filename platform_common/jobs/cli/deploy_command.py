"""`deploy render`: the Kubernetes objects of the workers (Deployment, PodDisruptionBudget,
KEDA ScaledObject per agent type) and a PrometheusRule of the alert rules, into a folder.

Needs the `monitoring` extra: the rules and the scaler's selectors come from the site
settings the monitoring bundle is generated from. This is the one module of the core
that imports monitoring, and only when the command runs (without the extra: MissingExtra,
one line, exit 2).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, TypeVar

import typer

from ..env import parse_int
from ..errors import ConfigurationError
from .exits import EXIT_FAILURE, CliError, MissingExtra
from .operator_output import command

__all__ = ["app", "render"]

_T = TypeVar("_T")

app = typer.Typer(help="Kubernetes objects of the workers.", no_args_is_help=True)


# Options typer would refuse in a box of usage text (a missing one, a number) are
# optional strings checked here instead: a missing or bad value is one line naming the
# option, exit 2.
@command(app, "render")
def render(
    image: Annotated[
        str | None,
        typer.Option(
            "--image",
            help="Required. The image the workers run: this package and your handler.",
            show_default=False,
        ),
    ] = None,
    handler: Annotated[
        str | None,
        typer.Option(
            "--handler",
            help="Required. pkg.module:function inside the image (as the worker's --handler).",
            show_default=False,
        ),
    ] = None,
    agent_types: Annotated[
        str | None,
        typer.Option(
            "--agent-types",
            help="Required. Comma-separated agent types; one set of objects each.",
            show_default=False,
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Required. Folder to write <agent type>.yaml and prometheus-rule.yaml into.",
            show_default=False,
        ),
    ] = None,
    prometheus_url: Annotated[
        str | None,
        typer.Option(
            "--prometheus-url",
            help="The Prometheus KEDA queries, as reached from inside the cluster "
            "(default: the site settings' prometheus_url).",
            show_default=False,
        ),
    ] = None,
    namespace: Annotated[
        str | None,
        typer.Option(
            "--namespace",
            help="Kubernetes namespace of every object (default: none written; kubectl's).",
            show_default=False,
        ),
    ] = None,
    site: Annotated[
        Path | None,
        typer.Option(
            "--site",
            help="Site settings YAML overlaid on the defaults, as `make generate SITE=`.",
            show_default=False,
        ),
    ] = None,
    redis_address: Annotated[
        str | None,
        typer.Option(
            "--redis-address",
            help="host:port of the Redis (TLS) the workers use (default: the Service of "
            "deploy/kubernetes/redis.yaml in namespace platform).",
            show_default=False,
        ),
    ] = None,
    concurrency: Annotated[
        str, typer.Option("--concurrency", help="Jobs per worker; the scaler's target per pod.")
    ] = "10",
) -> None:
    """Write the workers' Deployment, PodDisruptionBudget and KEDA ScaledObject per agent
    type (`<agent type>.yaml`) and a PrometheusRule of the alert rules
    (`prometheus-rule.yaml`, for the Prometheus Operator) into --out.

    The rules and the scaler's selectors (metric prefix, exporter job) come from the site
    settings, monitoring/site.defaults.yaml overlaid by --site, as the monitoring bundle.
    Files this command wrote are overwritten; a file of the same name it did not write
    stops it before anything is written (exit 1). Needs the `monitoring` extra.
    """
    try:
        from platform_common.jobs_monitoring import kubernetes
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.startswith("platform_common"):
            raise
        raise MissingExtra("deploy render", "monitoring", exc.name) from None
    image = _required("--image", image)
    handler = _required("--handler", handler)
    agent_types = _required("--agent-types", agent_types)
    out = _required("--out", out)
    config = kubernetes.load_config(site)
    workers = kubernetes.Workers(
        image=image,
        handler=handler,
        agent_types=tuple(t.strip() for t in agent_types.split(",") if t.strip()),
        prometheus_url=config.prometheus_url if prometheus_url is None else prometheus_url,
        namespace=namespace,
        concurrency=parse_int(concurrency, "--concurrency", minimum=1, maximum=10_000),
        **({} if redis_address is None else {"redis_address": redis_address}),
    )
    files = kubernetes.render(workers, config)
    if out.exists() and not out.is_dir():
        raise ConfigurationError("--out", f"{out} is not a folder")
    foreign = [name for name in files if not _ours(out / name, kubernetes.GENERATED_MARK)]
    if foreign:
        raise CliError(
            f"{out}: {', '.join(foreign)} not written by this command; move them or choose "
            "another --out (nothing written)",
            EXIT_FAILURE,
        )
    out.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (out / name).write_text(text, encoding="utf-8")
        print(f"wrote {out / name}")
    if handler == kubernetes.ECHO_HANDLER:
        print(
            f"warning: --handler {handler} is the package's echo: each job's result is its "
            "own payload, the workers do no work",
            file=sys.stderr,
        )


def _required(option: str, value: _T | None) -> _T:
    if value is None:
        raise ConfigurationError(option, "required (see `agentjobs deploy render --help`)")
    return value


def _ours(path: Path, mark: str) -> bool:
    """True when `path` is absent or a file this command wrote (it begins with `mark`)."""
    if not path.exists():
        return True
    try:
        with path.open(encoding="utf-8") as stream:
            return stream.readline().startswith(mark)
    except (OSError, UnicodeDecodeError):
        return False
