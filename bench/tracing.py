"""What tracing costs the queue (not a test): enqueue one by one, enqueue_many and drain
with the package as it was before tracing (old: bench.tracing_child.OLD_REVISION), and
this checkout with tracing off (no SDK: OpenTelemetry's global no-op provider) and on (an
SDK TracerProvider with a BatchSpanProcessor and an exporter that drops every span), side
by side.

    .venv/bin/python -m bench.tracing [--blocks 90] [--block-jobs 400] [--jobs 3000]
        [--rounds 9] [--concurrency 32] [--no-old]

Starts its own redis-server. Every side runs in its own child process of the same shape
(bench.tracing_child: old from an archived tree of its revision, off and on from this
checkout's working tree, all running bench/tracing_phases.py), so no side measures in an
interpreter the others do not have, and this process only dispatches and sums.

Enqueue one by one is a round trip per job, and on a shared host its rate swings by a
third within seconds: medians of a few long rounds per side do not resolve a 5%
difference. So it is measured in many short blocks (--blocks of --block-jobs jobs per
side) alternated between the sides, the order rotating by one each block (old, off, on;
off, on, old; ...), every side's blocks into the same queue (the server is flushed once
before the phase, not between blocks): a load swing lands on every side alike, in every
position alike when --blocks is a multiple of 3. A side's rate is its total jobs over
its total seconds across all blocks; the spread of the per-block paired ratio off/old
(each block's off beside the same block's old) is printed too. enqueue_many and drain
are measured in rounds (--rounds of --jobs jobs per side, the order rotating likewise,
the server flushed before each), and the table shows the median of the rounds; the
drain is one in-process Worker (no-op handler, --concurrency) in the child taking the N
queued jobs, from its ready event to the last completion. Every side is warmed up (one
block, one round) before measuring. 90 blocks by default (about 1.5 minutes in all on
2 cores): on a busy host one block's off/old can be off by half either way, and only
the sum over many alternated pairs averages that out.
The target (issue 18): with no SDK the hot paths cost no more than before, off's jobs/s
at least 95% of old's for every phase.
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial

from bench.queue_throughput import AGENT_TYPE, make_jobs
from bench.tracing_child import OLD_REVISION, Job, PhaseChild, PhaseChildError
from bench.tracing_phases import PHASES, ROUND_PHASES, flush
from tests.support.redis_server import RedisServer

OFF_WITHIN = 0.95
"""off's jobs/s over old's, at least, for every phase: "within 5% of today"."""

SIDES = ("old", "off", "on")

Rates = dict[str, list[float]]
"""jobs/s of each round phase, one entry per round."""

BlockSide = Callable[[list[Job]], float]
"""One side's enqueue block: seconds to enqueue these jobs one by one."""

RoundSide = Callable[[list[Job]], dict[str, float]]
"""One side's round: jobs/s of enqueue_many and drain for these jobs."""


@dataclass
class Results:
    block_jobs: int
    blocks: dict[str, list[float]]
    """Seconds of each enqueue block, per side, in block order."""
    rounds: dict[str, Rates]
    """jobs/s of enqueue_many and drain per round, per side."""

    @property
    def sides(self) -> list[str]:
        return [side for side in SIDES if side in self.blocks]


def rotated(names: Sequence[str], turn: int) -> list[str]:
    """`names` rotated left by `turn`: every name in every position as turns go by."""
    shift = turn % len(names)
    return [*names[shift:], *names[:shift]]


def run_blocks(sides: dict[str, BlockSide], n: int, blocks: int) -> dict[str, list[float]]:
    """Every side once per block, the order rotated by one each block; fresh jobs each."""
    seconds: dict[str, list[float]] = {side: [] for side in sides}
    for block in range(blocks):
        for side in rotated(list(sides), block):
            seconds[side].append(sides[side](make_jobs(n)))
    return seconds


def run_rounds(sides: dict[str, RoundSide], n: int, rounds: int) -> dict[str, Rates]:
    """Every side once per round, the order rotated by one each round; fresh jobs each."""
    results: dict[str, Rates] = {side: {phase: [] for phase in ROUND_PHASES} for side in sides}
    for round_number in range(rounds):
        for side in rotated(list(sides), round_number):
            for phase, rate in sides[side](make_jobs(n)).items():
                results[side][phase].append(rate)
    return results


def rate(results: Results, side: str, phase: str) -> float:
    """`side`'s jobs/s for `phase`: over all its blocks for enqueue, else the median round."""
    if phase == "enqueue":
        seconds = results.blocks[side]
        return results.block_jobs * len(seconds) / sum(seconds)
    return statistics.median(results.rounds[side][phase])


def paired_ratios(results: Results) -> list[float]:
    """off/old jobs/s of each enqueue block (same jobs per block: old's seconds / off's)."""
    return [
        old / off for old, off in zip(results.blocks["old"], results.blocks["off"], strict=True)
    ]


def target(results: Results, phase: str) -> tuple[float, bool] | None:
    """off/old of `phase` and whether it meets OFF_WITHIN (None without old)."""
    if "old" not in results.blocks:
        return None
    ratio = rate(results, "off", phase) / rate(results, "old", phase)
    return ratio, ratio >= OFF_WITHIN


def render(results: Results, header: str) -> str:
    """The table (a column of jobs/s per side, then on/off and off/old), the spread of
    enqueue's per-block off/old and the verdict line."""
    sides = results.sides
    lines = [header]
    columns = "".join(f" {side + ' jobs/s':>12}" for side in sides)
    lines.append(f"{'operation':<14}{columns}  on/off" + ("  off/old" if "old" in sides else ""))
    verdicts = []
    for phase in PHASES:
        rates = {side: rate(results, side, phase) for side in sides}
        cells = "".join(f" {rates[side]:>12,.0f}" for side in sides)
        row = f"{phase:<14}{cells}  {rates['on'] / rates['off']:6.2f}"
        met = target(results, phase)
        if met is not None:
            ratio, ok = met
            row += f"  {ratio:7.3f}"
            verdicts.append(f"{phase} {ratio:.3f} >= {OFF_WITHIN} {'met' if ok else 'MISSED'}")
        lines.append(row)
    if verdicts:
        paired = paired_ratios(results)
        lines.append(
            f"enqueue off/old per block: min {min(paired):.3f}, max {max(paired):.3f}, "
            f"median {statistics.median(paired):.3f} ({len(paired)} blocks)"
        )
        lines.append("off within 5% of old (off/old jobs/s): " + "; ".join(verdicts))
    return "\n".join(lines) + "\n"


@dataclass
class Plan:
    """What to measure: blocks x block_jobs for enqueue, rounds x jobs for the others."""

    blocks: int
    block_jobs: int
    rounds: int
    jobs: int
    concurrency: int


def measure(children: dict[str, PhaseChild], url: str, plan: Plan) -> Results:
    """Every phase of every side, alternated; each side warmed up first (unmeasured)."""
    block_sides: dict[str, BlockSide] = {
        name: partial(child.enqueue_block, url) for name, child in children.items()
    }
    round_sides: dict[str, RoundSide] = {
        name: partial(child.round, url, agent_type=AGENT_TYPE, concurrency=plan.concurrency)
        for name, child in children.items()
    }
    flush(url)
    run_blocks(block_sides, plan.block_jobs, 1)
    blocks = run_blocks(block_sides, plan.block_jobs, plan.blocks)
    run_rounds(round_sides, min(plan.jobs, 1_000), 1)
    rounds = run_rounds(round_sides, plan.jobs, plan.rounds)
    return Results(plan.block_jobs, blocks, rounds)


def header(plan: Plan, sides: Sequence[str], spans: int) -> str:
    order = ", ".join(sides)
    return (
        f"enqueue: {plan.blocks} blocks x {plan.block_jobs} jobs per side ({order}, "
        f"rotating each block), total jobs / total seconds; enqueue_many, drain: median of "
        f"{plan.rounds} rounds x N = {plan.jobs} (rotating), in-process worker (concurrency "
        f"{plan.concurrency}); no-op jobs, ~300-byte payload, one redis-server, every side "
        f"in its own process, {os.cpu_count()} cores; {spans:,} spans exported by on"
        + (f"; old = {OLD_REVISION[:10]} (before tracing)" if "old" in sides else "")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=90)
    parser.add_argument("--block-jobs", type=int, default=400)
    parser.add_argument("--jobs", type=int, default=3_000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument(
        "--no-old", action="store_true", help=f"skip the pre-tracing side ({OLD_REVISION[:10]})"
    )
    args = parser.parse_args()
    plan = Plan(args.blocks, args.block_jobs, args.rounds, args.jobs, args.concurrency)
    try:
        with ExitStack() as stack:
            url = stack.enter_context(RedisServer()).url
            children: dict[str, PhaseChild] = {}
            if not args.no_old:
                children["old"] = stack.enter_context(PhaseChild(OLD_REVISION))
            children["off"] = stack.enter_context(PhaseChild())
            children["on"] = stack.enter_context(PhaseChild(traced=True))
            results = measure(children, url, plan)
            spans = children["on"].spans()
    except PhaseChildError as error:
        hint = "" if args.no_old else " (--no-old skips the pre-tracing side)"
        raise SystemExit(f"bench.tracing: {error}{hint}") from error
    print(render(results, header(plan, list(children), spans)), end="")


if __name__ == "__main__":
    main()
