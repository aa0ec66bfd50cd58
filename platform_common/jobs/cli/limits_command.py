"""`limits show TYPE`, `limits set TYPE ...`: an agent type's rate, burst, caps and
fair-share key (JobQueue.limits / set_limits), live: workers apply a change from their
next claim on, without a restart."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from ..errors import ValidationError
from ..queue import JobQueue, Limits
from ..queue.limits import FAIR_BY_KEYS, KEEP, MAX_KEY_WEIGHT, FairWaits, weight_changes
from .job_command import AgentTypeArgument
from .operator_output import Output, OutputOption, RedisUrlOption, command, print_json, with_queue

__all__ = ["app"]

app = typer.Typer(help="Show or set an agent type's limits.", no_args_is_help=True)

_LIFT = "none"
"""The value that lifts a limit (`--rate none`)."""


def _option(flag: str, metavar: str, text: str) -> Any:
    return typer.Option(flag, metavar=metavar, help=f"{text} `{_LIFT}` lifts it.")


@command(app, "show")
def show(
    agent_type: AgentTypeArgument,
    output: OutputOption = Output.TABLE,
    redis_url: RedisUrlOption = None,
) -> None:
    """Show an agent type's limits: the key fair share goes by, the rate of job starts and
    its burst, and the caps on jobs running at once (per type and per key); with fair
    share, how many keys have jobs waiting and the ones waiting longest without a start."""

    async def read(queue: JobQueue) -> tuple[Limits, dict[str, int], FairWaits]:
        limits, weights = await queue.limits(agent_type), await queue.key_weights(agent_type)
        return limits, weights, await queue.fair_waits(agent_type)

    limits, weights, waits = with_queue(redis_url, read)
    _emit(limits, weights, waits, output=output)


@command(app, "set")
def set_(
    agent_type: AgentTypeArgument,
    fair_by: Annotated[
        str | None,
        _option(
            "--fair-by",
            "KEY",
            f"The payload field fair share goes by: {', '.join(FAIR_BY_KEYS)}, or {_LIFT} "
            "(plain FIFO).",
        ),
    ] = None,
    rate: Annotated[
        str | None,
        _option(
            "--rate",
            "N/s",
            "At most N job starts per second (or N/m, N/h, N/10s), across every worker.",
        ),
    ] = None,
    burst: Annotated[
        str | None,
        _option("--burst", "N", "How many starts may come at once after a quiet spell."),
    ] = None,
    max_running: Annotated[
        str | None,
        _option("--max-running", "N", "At most N jobs of the type running at once."),
    ] = None,
    max_running_per_key: Annotated[
        str | None,
        _option("--max-running-per-key", "N", "At most N running at once per fair-share key."),
    ] = None,
    key_weight: Annotated[
        list[str] | None,
        typer.Option(
            "--key-weight",
            metavar="KEY=W",
            help="Fair share: key KEY starts up to W jobs in a row on its turn (1 to "
            f"{MAX_KEY_WEIGHT}; default 1). Repeat for more keys; `KEY={_LIFT}` lifts it.",
        ),
    ] = None,
    output: OutputOption = Output.TABLE,
    redis_url: RedisUrlOption = None,
) -> None:
    """Set an agent type's limits; the ones not named stay as they are. Workers apply
    them from their next claim on, without a restart. A bad value is named and nothing
    is written. Needs the operator role in Redis."""
    changes: dict[str, Any] = {
        "fair_by": _value(fair_by, text=True),
        "rate": _value(rate, text=True),
        "burst": _value(burst),
        "max_running": _value(max_running),
        "max_running_per_key": _value(max_running_per_key),
    }
    weights = _weights(key_weight or [])
    if weights and all(value is KEEP for value in changes.values()):
        changes = {}  # only weights: the limits are read, not written

    async def write(queue: JobQueue) -> tuple[Limits, dict[str, int]]:
        if weights:
            weight_changes(weights)  # every value checked before anything is written
        limits = await (
            queue.set_limits(agent_type, **changes) if changes or not weights
            else queue.limits(agent_type)
        )  # fmt: skip
        if weights:
            return limits, await queue.set_key_weights(agent_type, weights)
        return limits, await queue.key_weights(agent_type)

    _emit(*with_queue(redis_url, write), output=output)


def _weights(given: list[str]) -> dict[str, int | None]:
    """`--key-weight KEY=W` options as set_key_weights takes them (a value that is no
    number stays text, which set_key_weights names as bad)."""
    weights: dict[str, Any] = {}
    for item in given:
        key, equals, value = item.rpartition("=")
        if not equals:
            raise ValidationError("key_weights", f"{item[:60]!r} is not KEY=W")
        weights[key] = _value(value)
    return weights


def _value(given: str | None, *, text: bool = False) -> Any:
    """An option as set_limits takes it: KEEP when not given, None for `none`, a number
    when it reads as one (else the text itself, which set_limits names as bad)."""
    if given is None:
        return KEEP
    if given == _LIFT:
        return None
    if not text and given.isascii() and given.isdigit():
        return int(given)
    return given


def _emit(
    limits: Limits,
    weights: dict[str, int],
    waits: FairWaits | None = None,
    *,
    output: Output,
) -> None:
    shown = limits.as_dict()
    if output == Output.JSON:
        fair_share = {} if waits is None else {"fair_share": waits.as_dict()}
        print_json({**shown, "key_weights": weights, **fair_share})
        return
    print(f"{limits.agent_type}: " + ("limits" if limits.any else "no limits (plain FIFO)"))
    for name, value in shown.items():
        if name == "agent_type":
            continue
        text = _LIFT if value is None else str(value)
        if name == "burst" and value is None and limits.rate is not None:
            text = f"{_LIFT} (the rate's count, {limits.rate.count})"
        print(f"  {name:<20} {text}")
    if weights:
        shown_weights = ", ".join(f"{key}={weight}" for key, weight in sorted(weights.items()))
        print(f"  {'key_weights':<20} {shown_weights}")
    if waits is not None and (waits.keys_waiting or limits.fair_by):
        print(f"fair share: {waits.keys_waiting:,} key(s) with jobs waiting")
        if waits.longest:
            sample = " (of a random sample)" if waits.sampled else ""
            print(f"  waiting longest without a start{sample}:")
        for key, age in waits.longest:
            print(f"  {age:>10.1f} s  {key}")
