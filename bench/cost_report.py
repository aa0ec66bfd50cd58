"""bench.cost's tables, targets and the docs section it writes (docs/operations.md)."""

from __future__ import annotations

import os
import re
import subprocess
from datetime import UTC, datetime
from pathlib import Path

from bench.cost import BATCH, STATES, CostReport, MemoryCost
from bench.cost_probes import command_costs

__all__ = [
    "BEGIN",
    "DOCS",
    "END",
    "MAXMEMORY_1GB",
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


def _per_job_us(seconds: float, jobs: int) -> float:
    return seconds / jobs * 1e6


def _payload(row: MemoryCost) -> str:
    return f"{row.size / 1024:.1f} KiB ({row.size:,} B)"


def _ratio(ours: float, raw: float) -> float | None:
    return ours / raw if raw > 0 else None


class _Rates:
    """The per-job figures of a report (Redis CPU in us, rates in jobs/s)."""

    def __init__(self, report: CostReport) -> None:
        cpu, n = report.cpu, report.jobs
        self.enqueue_us = _per_job_us(cpu.enqueue_cpu, n)
        self.lpush_us = _per_job_us(cpu.lpush_cpu, n)
        self.many_us = _per_job_us(cpu.many_cpu, n)
        self.batched_us = _per_job_us(cpu.batched_lpush_cpu, n)
        self.drain_us = _per_job_us(cpu.drain.redis_cpu, n)
        self.brpop_us = _per_job_us(cpu.brpop_cpu, n)
        self.worker_us = _per_job_us(cpu.drain.worker_cpu, n)
        self.client_us = _per_job_us(cpu.brpop_client_cpu, n)
        self.enqueue_rate = n / cpu.enqueue_seconds
        self.lpush_rate = n / cpu.lpush_seconds
        self.many_rate = n / cpu.many_seconds
        self.batched_rate = n / cpu.batched_lpush_seconds
        self.drain_rate = n / cpu.drain.seconds
        self.brpop_rate = n / cpu.brpop_seconds

    def per_core(self) -> tuple[float, float, float, float]:
        """Jobs/s one Redis core carries: drained (ours, raw BRPOP), then enqueued with
        enqueue_many and drained (ours, raw batched LPUSH + BRPOP)."""
        return (
            1e6 / self.drain_us,
            1e6 / self.brpop_us,
            1e6 / (self.many_us + self.drain_us),
            1e6 / (self.batched_us + self.brpop_us),
        )


def targets(report: CostReport) -> list[tuple[str, bool | None]]:
    """(target with the measured ratio, met); None when this run did not measure it."""
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
    ratio = rates.drain_us / rates.brpop_us
    checks.append((f"Redis CPU per drained job {ratio:.3f}x <= 1.2x raw BRPOP's", ratio <= 1.2))
    ratio = rates.drain_rate / rates.brpop_rate
    checks.append((f"one worker drains {ratio:.3f}x >= 1.3x raw BRPOP jobs/s", ratio >= 1.3))
    ratio = rates.enqueue_rate / rates.lpush_rate
    checks.append((f"single enqueue {ratio:.3f}x >= 0.75x raw LPUSH jobs/s", ratio >= 0.75))
    checks.append(
        (f"enqueue_many {rates.many_rate:,.0f} >= 30,000 jobs/s", rates.many_rate >= 30_000)
    )
    return checks


_PROCESS_ROW = "process CPU per drained job"
_RARE = 0.001
"""Commands rarer than this per drained job are named in one line, not a row each."""


def _load(report: CostReport) -> str:
    before, after = report.load
    return f"load average {before:.1f} at the start, {after:.1f} at the end"


def _fmt_ratio(value: float | None) -> str:
    return f"{value:.2f}" if value is not None else "-"


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
        f"{cpu.size:,}-byte payloads",
        f"{'operation':<36} {'ours us':>8} {'raw us':>8} {'ratio':>6} {'ours/s':>9} "
        f"{'raw/s':>9} {'ratio':>6}  raw is",
    ]
    rows = [
        ("enqueue, one by one", rates.enqueue_us, rates.lpush_us, rates.enqueue_rate,
         rates.lpush_rate, "LPUSH one by one, alternated blocks"),
        ("enqueue_many", rates.many_us, rates.lpush_us, rates.many_rate, rates.lpush_rate,
         "LPUSH one by one"),
        ("enqueue_many vs batched LPUSH", rates.many_us, rates.batched_us, rates.many_rate,
         rates.batched_rate, f"LPUSH of {BATCH} payloads per command"),
        (f"drain, 1 worker (concurrency {report.concurrency})", rates.drain_us, rates.brpop_us,
         rates.drain_rate, rates.brpop_rate, "BRPOP one by one"),
        (_PROCESS_ROW, rates.worker_us, rates.client_us, rates.drain_rate,
         rates.brpop_rate, "the BRPOP client's CPU"),
    ]  # fmt: skip
    for name, ours_us, raw_us, ours_rate, raw_rate, label in rows:
        # The process CPU row's rates are the drain's: not repeated.
        rate_cells = (
            f"{ours_rate:>9,.0f} {raw_rate:>9,.0f} {ours_rate / raw_rate:>6.2f}"
            if name != _PROCESS_ROW
            else f"{'':>9} {'':>9} {'':>6}"
        )
        lines.append(
            f"{name:<36} {ours_us:>8.1f} {raw_us:>8.1f} {ours_us / raw_us:>6.2f} "
            f"{rate_cells}  {label}"
        )
    lines += [
        "",
        "Commands per drained job (INFO commandstats delta / N over one full drain by one "
        "worker process)",
        f"{'command':<20} {'calls/job':>10} {'us/call':>8} {'us/job':>8}",
    ]
    costs = command_costs(cpu.drain.commands, n)
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
    raw_costs = command_costs(cpu.brpop_commands, n)
    lines += [
        "(a script's us include the commands it runs, which Redis counts in their own rows "
        "too; Redis CPU per drained job in all: "
        f"{rates.drain_us:.1f} us)",
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
        f"{report.concurrency}.",
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
        f"One Redis core drains **{drained:,.0f} jobs/s** ({rates.drain_us:.1f} us of Redis "
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
