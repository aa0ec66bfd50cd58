"""bench.cost's tables, targets and the docs section it writes (docs/operations.md)."""

from __future__ import annotations

import os
import re
import statistics
import subprocess
from datetime import UTC, datetime
from pathlib import Path

from bench.cost_probes import command_costs
from bench.cost_readings import BATCH, STATES, CostReport, MemoryCost, Reading

__all__ = [
    "BEGIN",
    "DOCS",
    "END",
    "MAXMEMORY_1GB",
    "Compared",
    "docs_section",
    "machine",
    "render",
    "replace_section",
    "source_version",
    "targets",
    "write_docs",
]

DOCS = Path(__file__).resolve().parent.parent / "docs" / "operations.md"
BEGIN = "<!-- cost-table:begin -->"
END = "<!-- cost-table:end -->"
MAXMEMORY_1GB = 1 << 30
"""What `maxmemory 1gb` sets: Redis reads "gb" as 1024^3 bytes."""
RAW_IS = {
    "queued": "LPUSH of the payload JSON to one list",
    "running": "LMOVE into a processing list",
    "after success": "nothing held",
    "dead-lettered": "nothing held",
}


class Compared:
    """One figure of ours and raw over the rounds: medians, their ratio, and the spread.

    `paired`: round i of ours ran next to round i of raw (the same Rounds), so each
    round's own ratio is meaningful too; the host's load drifts between rounds much more
    than within one."""

    def __init__(self, ours: list[float], raw: list[float], *, paired: bool) -> None:
        if not ours or not raw:
            raise ValueError("no rounds to compare")
        self.ours, self.raw, self.paired = ours, raw, paired

    @property
    def ours_median(self) -> float:
        return statistics.median(self.ours)

    @property
    def raw_median(self) -> float:
        return statistics.median(self.raw)

    @property
    def ratio(self) -> float:
        """The ratio of the medians."""
        return self.ours_median / self.raw_median

    def round_ratios(self) -> list[float]:
        """Each round's ours / the raw reading next to it; [] when not paired."""
        if not self.paired:
            return []
        return [ours / raw for ours, raw in zip(self.ours, self.raw, strict=True)]


def _per_job_us(readings: list[Reading], jobs: int, field: str = "redis_cpu") -> list[float]:
    return [float(getattr(reading, field)) / jobs * 1e6 for reading in readings]


def _rates(readings: list[Reading], jobs: int) -> list[float]:
    return [jobs / reading.seconds for reading in readings]


def _payload(row: MemoryCost) -> str:
    return f"{row.size / 1024:.1f} KiB ({row.size:,} B)"


def _ratio(ours: float, raw: float) -> float | None:
    return ours / raw if raw > 0 else None


class _Rates:
    """The per-job figures of a report over its rounds (Redis CPU in us, rates in
    jobs/s)."""

    def __init__(self, report: CostReport) -> None:
        cpu, n = report.cpu, report.jobs
        self.enqueue_rounds, self.rounds = len(cpu.enqueue.ours), cpu.rounds
        self.enqueue_us = Compared(
            _per_job_us(cpu.enqueue.ours, n), _per_job_us(cpu.enqueue.raw, n), paired=True
        )
        self.enqueue_rate = Compared(
            _rates(cpu.enqueue.ours, n), _rates(cpu.enqueue.raw, n), paired=True
        )
        self.many_us = Compared(
            _per_job_us(cpu.many.ours, n), _per_job_us(cpu.enqueue.raw, n), paired=False
        )
        self.many_rate = Compared(
            _rates(cpu.many.ours, n), _rates(cpu.enqueue.raw, n), paired=False
        )
        self.batched_us = Compared(
            _per_job_us(cpu.many.ours, n), _per_job_us(cpu.many.raw, n), paired=True
        )
        self.batched_rate = Compared(_rates(cpu.many.ours, n), _rates(cpu.many.raw, n), paired=True)
        self.drain_us = Compared(
            _per_job_us(cpu.drain.ours, n), _per_job_us(cpu.drain.raw, n), paired=True
        )
        self.drain_rate = Compared(_rates(cpu.drain.ours, n), _rates(cpu.drain.raw, n), paired=True)
        self.process_us = Compared(
            _per_job_us(cpu.drain.ours, n, "process_cpu"),
            _per_job_us(cpu.drain.raw, n, "process_cpu"),
            paired=True,
        )

    def per_core(self) -> tuple[float, float, float, float]:
        """Jobs/s one Redis core carries, from the medians: drained (ours, raw BRPOP),
        then enqueued with enqueue_many and drained (ours, raw batched LPUSH + BRPOP)."""
        return (
            1e6 / self.drain_us.ours_median,
            1e6 / self.drain_us.raw_median,
            1e6 / (self.batched_us.ours_median + self.drain_us.ours_median),
            1e6 / (self.batched_us.raw_median + self.drain_us.raw_median),
        )


def _round_span(compared: Compared) -> str:
    """' (rounds 1.80-2.10x)': the per-round ratios' spread, or ''."""
    ratios = compared.round_ratios()
    if len(ratios) < 2:
        return ""
    return f" (rounds {min(ratios):.2f}-{max(ratios):.2f}x)"


def targets(report: CostReport) -> list[tuple[str, bool | None]]:
    """(target with the measured ratio, met); None when this run did not measure it.
    CPU and rate targets compare the medians of the rounds."""
    rates = _Rates(report)
    checks: list[tuple[str, bool | None]] = []
    half = [row for row in report.memory if row.target == 512]
    if half:
        ratio = half[0].ours["queued"] / half[0].raw["queued"]
        checks.append((f"queued 0.5 KiB {ratio:.3f}x <= 1.5x raw bytes", ratio <= 1.5))
    else:
        checks.append(("queued 0.5 KiB <= 1.5x raw bytes (not measured: no 512 size)", None))
    if report.memory:
        worst = max(report.memory, key=lambda row: row.ours["queued"] / row.raw["queued"])
        ratio = worst.ours["queued"] / worst.raw["queued"]
        checks.append(
            (f"every size queued {ratio:.3f}x <= 2x raw (worst: {worst.size:,} B)", ratio <= 2)
        )
    drain_us, drain_rate, enqueue_rate = rates.drain_us, rates.drain_rate, rates.enqueue_rate
    checks.append((
        f"Redis CPU per drained job {drain_us.ratio:.3f}x <= 1.2x raw BRPOP's"
        f"{_round_span(drain_us)}", drain_us.ratio <= 1.2
    ))  # fmt: skip
    checks.append((
        f"one worker drains {drain_rate.ratio:.3f}x >= 1.3x raw BRPOP jobs/s"
        f"{_round_span(drain_rate)}", drain_rate.ratio >= 1.3
    ))  # fmt: skip
    checks.append((
        f"single enqueue {enqueue_rate.ratio:.3f}x >= 0.75x raw LPUSH jobs/s"
        f"{_round_span(enqueue_rate)}", enqueue_rate.ratio >= 0.75
    ))  # fmt: skip
    many = rates.many_rate.ours_median
    checks.append((f"enqueue_many {many:,.0f} >= 30,000 jobs/s", many >= 30_000))
    return checks


_PROCESS_ROW = "process CPU per drained job"
_RARE = 0.001
"""Commands rarer than this per drained job are named in one line, not a row each."""


def _load(report: CostReport) -> str:
    before, after = report.load
    return f"load average {before:.1f} at the start, {after:.1f} at the end"


def _fmt_ratio(value: float | None) -> str:
    return f"{value:.2f}" if value is not None else "-"


def _span(values: list[float], spec: str) -> str:
    """'min-max' of `values` (one value: itself; none: '-')."""
    if not values:
        return "-"
    low, high = min(values), max(values)
    if len(values) == 1:
        return format(low, spec)
    return f"{format(low, spec)}-{format(high, spec)}"


def render(report: CostReport) -> str:
    """Every table of the run, as printed."""
    n, cpu, rates = report.jobs, report.cpu, _Rates(report)
    lines = [
        f"N = {n:,} jobs per measurement; one redis-server {report.redis_version} "
        f"(no persistence); {os.cpu_count()} cores, {_load(report)}; worker concurrency "
        f"{report.concurrency}",
        "",
        "Redis memory per job (bytes; INFO used_memory delta / N)",
        f"{'payload':<22} {'state':<14} {'ours':>8} {'raw':>8} {'ours-raw':>9} "
        f"{'ours/raw':>8}  raw is",
    ]
    for row in report.memory:
        for state in STATES:
            ours, raw = row.ours[state], row.raw[state]
            lines.append(
                f"{_payload(row):<22} {state:<14} {ours:>8,.0f} {raw:>8,.0f} {ours - raw:>9,.0f} "
                f"{_fmt_ratio(_ratio(ours, raw)):>8}  {RAW_IS[state]}"
            )
    lines += [
        "",
        f"Redis CPU per job (us; INFO used_cpu_sys + used_cpu_user delta / N) and jobs/s, "
        f"{cpu.size:,}-byte payloads: medians of alternated rounds of ours and raw "
        f"({rates.rounds} for the drain and enqueue_many, {rates.enqueue_rounds} for enqueue "
        "one by one; FLUSHALL between), ratio = ours median / raw median",
        f"{'operation':<36} {'ours us':>8} {'raw us':>8} {'ratio':>6} {'ours/s':>9} "
        f"{'raw/s':>9} {'ratio':>6}  raw is",
    ]
    rows = [
        ("enqueue, one by one", rates.enqueue_us, rates.enqueue_rate,
         "LPUSH one by one, alternated blocks"),
        ("enqueue_many", rates.many_us, rates.many_rate, "LPUSH one by one"),
        ("enqueue_many vs batched LPUSH", rates.batched_us, rates.batched_rate,
         f"LPUSH of {BATCH} payloads per command"),
        (f"drain, 1 worker (concurrency {report.concurrency})", rates.drain_us,
         rates.drain_rate, "BRPOP one by one"),
        (_PROCESS_ROW, rates.process_us, None, "the BRPOP client's CPU"),
    ]  # fmt: skip
    for name, us, rate, label in rows:
        # The process CPU row's rates are the drain's: not repeated.
        rate_cells = (
            f"{rate.ours_median:>9,.0f} {rate.raw_median:>9,.0f} {rate.ratio:>6.2f}"
            if rate is not None
            else f"{'':>9} {'':>9} {'':>6}"
        )
        lines.append(
            f"{name:<36} {us.ours_median:>8.1f} {us.raw_median:>8.1f} {us.ratio:>6.2f} "
            f"{rate_cells}  {label}"
        )
    lines += [
        "",
        "Spread over the rounds (min-max; round ratio: each round's ours / the raw reading "
        "next to it, '-' where ours and raw come from different rounds)",
        f"  {'operation':<34} {'rounds':>6} {'ours us':>13} {'raw us':>13} {'round ratio':>11} "
        f"{'ours/s':>17} {'raw/s':>17} {'round ratio':>11}",
    ]
    for name, us, rate, _ in rows:
        counts = (
            f"{len(us.ours)}" if len(us.ours) == len(us.raw) else f"{len(us.ours)}/{len(us.raw)}"
        )
        line = (
            f"  {name:<34} {counts:>6} {_span(us.ours, '.1f'):>13} {_span(us.raw, '.1f'):>13} "
            f"{_span(us.round_ratios(), '.2f'):>11}"
        )
        if rate is not None:
            line += (
                f" {_span(rate.ours, ',.0f'):>17} {_span(rate.raw, ',.0f'):>17} "
                f"{_span(rate.round_ratios(), '.2f'):>11}"
            )
        lines.append(line.rstrip())
    drained_jobs = n * cpu.rounds
    lines += [
        "",
        "Commands per drained job (INFO commandstats delta summed over the "
        f"{cpu.rounds} drains by one worker process / {drained_jobs:,} jobs)",
        f"{'command':<20} {'calls/job':>10} {'us/call':>8} {'us/job':>8}",
    ]
    costs = command_costs(cpu.drain_commands, drained_jobs)
    for cost in costs:
        if cost.calls_per_job >= _RARE:
            lines.append(
                f"{cost.command:<20} {cost.calls_per_job:>10.3f} {cost.usec_per_call:>8.2f} "
                f"{cost.usec_per_job:>8.2f}"
            )
    rare = [cost for cost in costs if cost.calls_per_job < _RARE]
    if rare:
        lines.append(
            f"(and under {_RARE} calls/job, start-up and chores: "
            + ", ".join(cost.command for cost in rare)
            + f"; {sum(cost.usec_per_job for cost in rare):.2f} us/job)"
        )
    raw_costs = command_costs(cpu.brpop_commands, drained_jobs)
    lines += [
        "(a script's us include the commands it runs, which Redis counts in their own rows "
        "too; Redis CPU per drained job in all, median: "
        f"{rates.drain_us.ours_median:.1f} us)",
        "raw BRPOP drain: "
        + ", ".join(
            f"{cost.command} {cost.calls_per_job:.3f}/job at {cost.usec_per_call:.2f} us/call"
            for cost in raw_costs
        ),
        "",
        "Sizing",
    ]
    for row in report.memory:
        lines.append(
            f"a maxmemory 1gb Redis holds {MAXMEMORY_1GB / row.ours['queued']:>12,.0f} queued "
            f"jobs of {_payload(row)} (raw list: {MAXMEMORY_1GB / row.raw['queued']:,.0f})"
        )
    drained, raw_drained, both, raw_both = rates.per_core()
    lines += [
        f"drained jobs/s per Redis core: {drained:,.0f} (raw BRPOP: {raw_drained:,.0f}); "
        f"enqueued with enqueue_many and drained: {both:,.0f} "
        f"(raw batched LPUSH + BRPOP: {raw_both:,.0f})",
        "",
        "targets: "
        + "; ".join(
            f"{name} {'met' if ok else 'MISSED' if ok is not None else 'n/a'}"
            for name, ok in targets(report)
        ),
    ]
    return "\n".join(lines)


def machine(redis_version: str) -> str:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = f" ({line.partition(':')[2].strip()})"
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores{model}, redis-server {redis_version}"


def source_version(root: Path = DOCS.parent.parent) -> str:
    """ "commit abc1234" (plus " with uncommitted changes") of the tree measured, or ""
    outside a git checkout: which key layout the numbers belong to."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
            text=True, check=True,
        ).stdout.strip()  # fmt: skip
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return ""
    return f"commit {commit}" + (" with uncommitted changes" if changed else "")


def docs_section(report: CostReport, command: str, where: str, version: str = "") -> str:
    """The markdown between the cost-table markers: sizing, then memory per job."""
    rates = _Rates(report)
    drained, raw_drained, both, raw_both = rates.per_core()
    day = datetime.now(UTC).date().isoformat()
    lines = [
        f"Measured by `{command}` on {day}{f' at {version}' if version else ''}: {where} "
        f"({_load(report)}), N = "
        f"{report.jobs:,} jobs per measurement, one worker process of concurrency "
        f"{report.concurrency}; jobs/s and CPU are medians of {rates.rounds} alternated "
        "rounds of ours and raw.",
        "",
        "| payload | queued jobs a `maxmemory 1gb` Redis holds | the same payloads in a raw list |",
        "|---|---:|---:|",
    ]
    for row in report.memory:
        lines.append(
            f"| {_payload(row)} | {MAXMEMORY_1GB / row.ours['queued']:,.0f} "
            f"| {MAXMEMORY_1GB / row.raw['queued']:,.0f} |"
        )
    lines += [
        "",
        f"One Redis core drains **{drained:,.0f} jobs/s** ({rates.drain_us.ours_median:.1f} us "
        "of Redis "
        f"CPU per drained job, {report.cpu.size:,}-byte payloads; raw BRPOP one by one: "
        f"{raw_drained:,.0f}), and enqueues with `enqueue_many` and drains {both:,.0f} jobs/s "
        f"(raw batched LPUSH + BRPOP: {raw_both:,.0f}).",
        "",
        "Redis memory per job, bytes (`used_memory` delta / N; allocator fragmentation "
        "comes on top). Running: claimed under a lease; after success and dead-lettered: "
        'what stays until it expires (see "What expires when"):',
        "",
        "| payload | queued | running | after success | dead-lettered | raw list: queued "
        "| raw list: taken |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in report.memory:
        cells = " | ".join(f"{row.ours[state]:,.0f}" for state in STATES)
        lines.append(
            f"| {_payload(row)} | {cells} | {row.raw['queued']:,.0f} | {row.raw['running']:,.0f} |"
        )
    return "\n".join(lines) + "\n"


def replace_section(text: str, section: str) -> str:
    """`text` with what lies between the cost-table markers replaced by `section`."""
    pattern = re.compile(re.escape(BEGIN) + r"\n.*?" + re.escape(END), re.S)
    if len(pattern.findall(text)) != 1:
        raise ValueError(f"{DOCS} must hold exactly one {BEGIN} ... {END} pair")
    return pattern.sub(lambda _: f"{BEGIN}\n{section}{END}", text)


def write_docs(report: CostReport, command: str, path: Path = DOCS) -> None:
    section = docs_section(report, command, machine(report.redis_version), source_version())
    path.write_text(replace_section(path.read_text(encoding="utf-8"), section), encoding="utf-8")
