"""A Report laid out as titled tables (`Section`s), shared by the text and Markdown renderers."""

from __future__ import annotations

import statistics
from typing import Any, Mapping, Optional

from tracekit.analysis.advice import command as advice_command
from tracekit.analysis.model import (
    BOUND_CPUS,
    CAUSES,
    HOST_STATES,
    Advice,
    Communication,
    CompiledSummary,
    HostReport,
    Report,
    SteadyState,
)
from tracekit.analysis.steps import outliers
from tracekit.render.base import Section
from tracekit.render.memory import NO_MEMORY_EVENTS, memory_sections, oom_note
from tracekit.whatif.profiler import MEASURED_RANGE_US, untrusted_default

TOP_ROWS = 10  # rows shown in the longer tables (the JSON has everything)
MANY_RANKS = 8  # beyond, the report summarises the ranks instead of a table set per rank


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f}"


def _us(ns: float) -> str:
    return f"{ns / 1e3:.1f}"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _short(name: str | None, width: int = 60) -> str:
    if not name:
        return "-"
    return name if len(name) <= width else name[: width - 1] + "…"


def manifest_parts(c: Mapping[str, Any]) -> list[str]:
    """'workload heavy_mlp', 'python 3.11.7' ...: the capture's identity in words, from its manifest."""
    parts = []
    for key in ("workload", "run", "device", "python", "torch", "host"):
        v = c.get(key)
        if isinstance(v, dict):  # the capture manifest's environment records
            v = v.get("version") or v.get("name")
        if v:
            parts.append(f"{key} {v}")
    return parts


def header(report: Report) -> list[str]:
    c = report.capture
    parts = manifest_parts(c)
    lines = ["tracekit analysis" + (": " + ", ".join(parts) if parts else "")]
    if c.get("rank_of_job") is not None:
        lines.append(f"rank {c['rank_of_job']} of a job of {len(c.get('ranks') or [])} ranks (--rank)")
    sources = [str(s) for s in c.get("sources") or []]
    if len(sources) > MANY_RANKS:
        lines.append(f"sources: {len(sources)} files ({sources[0]} … {sources[-1]})")
    elif sources:
        lines.append("sources: " + ", ".join(sources))
    steps = steps_line(report)
    if steps:
        lines.append(steps)
    for n in report.no_work:
        lines.append(
            f"no work: rank {n.rank}: {n.stretches} stretch(es) between requests, {_ms(n.no_work_ns)} ms in "
            f"all (median {_ms(n.median_ns)} ms), in no step: the thread ran nothing and nothing was queued"
        )
    for g in report.graph_captures:
        lines.append(
            f"graph capture: rank {g.rank} records {g.captures} graph capture(s) ({g.call} … EndCapture, "
            f"then instantiate): {g.launches} kernel launches recorded, not run; {_ms(g.capture_ns)} ms, "
            f"{g.share_of_steps:.1%} of the steps, in which the device idles because kernels are recorded, "
            "not because the host held it back"
        )
    if report.job is not None and len(report.ranks) > MANY_RANKS:
        j = report.job
        slowest = "" if j.slowest_rank is None else f", rank {j.slowest_rank} the slowest most often"
        lines.append(
            f"job: {j.ranks} ranks, {j.devices} devices, {j.steps} steps; step time (the slowest rank's, "
            f"per step) median {j.step_median_ms:.3f} ms, max {j.step_max_ms:.3f} ms{slowest}"
        )
    return lines


def steps_line(report: Report, most: int = 3) -> str | None:
    """Which rule found the steps (tracekit.parse.iterations), one line: the same for every rank, or
    rank by rank (the first `most` kinds)."""
    groups: dict[tuple, list[int]] = {}
    for r in report.step_rules:
        groups.setdefault(
            (r.rule, r.marker, r.units_per_step, r.steps if r.rule != "none" else 0), []
        ).append(r.rank)
    if not groups:
        return None

    def said(key: tuple, ranks: list[int]) -> str:
        rule = next(r for r in report.step_rules if r.rank == ranks[0])
        if rule.rule == "none":
            return rule.says()
        return f"{rule.steps}, found by {rule.says()}"

    if len(groups) == 1:
        ((key, ranks),) = groups.items()
        return "steps: " + said(key, ranks) + (f" (each of {len(ranks)} ranks)" if len(ranks) > 1 else "")
    parts = [f"rank {_ranks(ranks)}: {said(k, ranks)}" for k, ranks in list(groups.items())[:most]]
    more = f"; {len(groups) - most} more kinds" if len(groups) > most else ""
    return "steps: " + "; ".join(parts) + more


def _ranks(ranks: list[int]) -> str:
    return (
        str(ranks[0])
        if len(ranks) == 1
        else f"{ranks[0]}-{ranks[-1]}"
        if ranks == list(range(ranks[0], ranks[-1] + 1))
        else ",".join(map(str, ranks))
    )


def many_ranks(report: Report) -> bool:
    """Whether the report summarises its ranks (more than MANY_RANKS) instead of showing each."""
    return report.job is not None and len(report.ranks) > MANY_RANKS


def job_sections(report: Report) -> list[Section]:
    """The ranks of a large job in three tables: figures across ranks, stragglers, ranks that differ."""
    j = report.job
    assert j is not None
    out = [
        Section(
            f"figures across the {j.devices} devices (ms/step of each device)",
            ["", "median", "p90", "max", "max on rank"],
            [
                [f.figure, f"{f.median_ms:.3f}", f"{f.p90_ms:.3f}", f"{f.max_ms:.3f}", str(f.max_rank)]
                for f in j.spreads
            ],
        )
    ]
    if j.stragglers:
        out.append(
            Section(
                "stragglers: the ranks others wait for in collectives",
                ["rank", "waited on by", "their wait ms/step (sum)", "median per device"],
                [
                    [
                        str(s.rank),
                        f"{s.waited_on_by} device(s)",
                        f"{s.wait_ms_per_step_total:.3f}",
                        f"{s.wait_ms_per_step_median:.3f}",
                    ]
                    for s in j.stragglers
                ],
                align="rrrr",
            )
        )
    if j.outliers:
        out.append(
            Section(
                "ranks that differ from the rest",
                ["rank:dev", "figure", "ms/step", "median", "differs also in"],
                [
                    [
                        f"{o.rank}:{o.device}",
                        o.figure,
                        f"{o.value_ms:.3f}",
                        f"{o.median_ms:.3f}",
                        ", ".join(o.others) or "-",
                    ]
                    for o in j.outliers
                ],
                align="rlrrl",
            )
        )
    else:
        out[-1].notes.append("no rank differs from the rest by more than 3 MADs and 1 % of the step")
    return out


# The host windows' median differs from the steps' by more than this: the report shows both.
HOST_WINDOW_DIFFERS = 0.02
# ... and by more than this, shorter: the host runs ahead (it queues steps faster than the device runs them).
HOST_RUNS_AHEAD = 0.1


def device_sections(report: Report) -> list[Section]:
    out = []
    for d in report.devices:
        step_ns = d.step_ns
        total = sum(step_ns) or 1
        per_step = d.idle_ns_per_step()
        mean_step = total / max(d.steps, 1)
        rows = [["busy", _ms(mean_step * d.gpu_utilization), _pct(d.gpu_utilization)]]
        for c in CAUSES:
            rows.append([f"idle: {c}", _ms(per_step[c]), _pct(per_step[c] / mean_step if mean_step else 0)])
        columns = ["", "ms/step", "% of step"]
        savings = report.savings is not None and report.savings.computed
        if savings:
            columns += ["saved if removed", "unprofiled"]
            _saving_cells(rows, d.savings_ms_per_step)
        notes = [
            f"{d.steps} steps; step ms mean {_ms(statistics.fmean(step_ns))}, median "
            f"{_ms(statistics.median(step_ns))}, min {_ms(min(step_ns))}, max {_ms(max(step_ns))}; "
            f"GPU utilization {_pct(d.gpu_utilization)}; idle gaps per step "
            f"{sum(s.idle_gaps for s in d.samples) / max(d.steps, 1):.1f}",
        ]
        slow = outliers([s.step for s in d.samples], step_ns)
        if slow:
            notes.append(
                "outlier step(s), far from the median (in the mean, not the median): "
                + ", ".join(f"#{k} {_ms(v)} ms" for k, v in slow[:5])
            )
        host = [s.host_dur_ns for s in d.samples if s.host_dur_ns]
        ratio = statistics.median(host) / max(statistics.median(step_ns), 1) if host else 1.0
        if abs(ratio - 1) > HOST_WINDOW_DIFFERS:
            why = (
                "the host runs ahead of the device"
                if ratio < 1 - HOST_RUNS_AHEAD
                else "the device finishes a step's work after its host window"
                if ratio < 1
                else "a step's device work reaches into the next host window"
            )
            notes.append(
                "a step lasts until both its host window and the device work launched in it are done; "
                f"host windows median {_ms(statistics.median(host))} ms: {why}"
            )
        if any(s.collective_wait_ns for s in d.samples) or d.straggler_rank is not None:
            straggler = "none" if d.straggler_rank is None else f"rank {d.straggler_rank}"
            notes.append(
                f"collective wait {d.collective_wait_ms_per_step:.3f} ms/step (inside busy); "
                f"straggler: {straggler}"
            )
        after_ms = d.busy_after_last_step_ns / 1e6
        if after_ms > 0.1 * (total / 1e6):
            notes.append(
                f"the device was busy {after_ms:.1f} ms more after the last step window ended: the host "
                "ran ahead of it, so its steps hold only part of its work (compare step times across ranks)"
            )
        if d.throughput_per_s is not None and after_ms <= 0.1 * (total / 1e6):
            notes.append(f"throughput {d.throughput_per_s:.1f} samples/s ({d.samples_per_step} per step)")
        if d.peak_memory_bytes is not None:
            notes.append(f"peak device memory {_bytes(d.peak_memory_bytes)}")
        name = f" ({d.name})" if d.name else ""
        if savings:
            notes.append(_savings_note(report, d.savings_ms_per_step is not None))
            ceiling = _python_ceiling(d.savings_ms_per_step, mean_step / 1e6)
            if ceiling:
                notes.append(ceiling)
        out.append(
            Section(f"rank {d.rank} device {d.device}{name}: where the step time went", columns, rows, notes)
        )
    return out


def _saving_cells(rows: list[list[str]], saved) -> None:
    """Each cause's predicted saving (ms/step), profiled and unprofiled, beside its idle share: blank for
    busy, '-' for queued (nothing on the host to remove) and where the savings are not trusted."""
    rows[0] += ["", ""]
    for row, c in zip(rows[1:], CAUSES):
        if saved is None or c not in saved.get("profiled", {}):
            row += ["-", "-"]
        else:
            row += [_ms(saved["profiled"][c] * 1e6), _ms(saved["unprofiled"][c] * 1e6)]


def _python_ceiling(saved, step_ms: float) -> str | None:
    """The most any faster interpreter could save: the interpreter cause removed, replayed."""
    if saved is None or "interpreter" not in saved.get("profiled", {}) or step_ms <= 0:
        return None
    prof, unprof = saved["profiled"]["interpreter"], saved["unprofiled"]["interpreter"]
    if not (0 <= prof <= step_ms and 0 <= unprof <= step_ms):
        return None  # a saving outside the step is the replay's error, not a ceiling
    return (
        f"a faster Python could save at most {_ms(prof * 1e6)} ms/step ({_pct(prof / step_ms)} of the step; "
        f"unprofiled {_ms(unprof * 1e6)} ms): the interpreter's host time removed, replayed; a real speed-up "
        "removes part of it (`tracekit whatif --python-speedup S` or `--python-from B`)"
    )


def _savings_note(report: Report, trusted: bool) -> str:
    if not trusted:
        return (
            "saved if removed: not shown; the unchanged replay misses this device's step by more than 2 % "
            "(`tracekit whatif` says why)"
        )
    info = report.savings
    assert info is not None and info.profiler_cost_us_per_event is not None
    lo, hi = MEASURED_RANGE_US
    source = {
        "manifest": "for the manifest's unprofiled step",
        "default": f"default: no unprofiled step; costs fitted on real captures ranged {lo:g}-{hi:g} "
        "µs/event",
    }
    cost = info.profiler_cost_us_per_event
    why = source.get(info.profiler_cost_source or "", "")
    note = (
        f"saved if removed: replayed with that cause alone removed (unprofiled: less {cost:.1f} µs/event "
        f"of profiler cost, {why}); savings need not sum to the idle time: removing a cause can let "
        "another hold the device, or shorten a host-bound step by more than its idle share"
    )
    untrusted = untrusted_default(report.dataloader.iterator if report.dataloader else None)
    if info.profiler_cost_source == "default" and untrusted:
        note += f". Warning: {untrusted}"
    return note


def host_sections(report: Report) -> list[Section]:
    """The host table: one for all steps, or one per rank when there are several (ranks differ: on a
    DDP run the slow rank's interpreter time is the fast rank's collective wait), or, beyond
    MANY_RANKS, one over all ranks (their spread is in the job tables)."""
    ranks = sorted({s.rank for s in report.host.steps})
    if len(ranks) <= 1:
        return [host_section(report.host)]
    if len(ranks) > MANY_RANKS:
        return [host_section(report.host, ranks=len(ranks))]
    return [
        host_section(HostReport(steps=tuple(s for s in report.host.steps if s.rank == r)), rank=r)
        for r in ranks
    ]


def host_section(h: HostReport, rank: int | None = None, ranks: int | None = None) -> Section:
    step_ms = statistics.fmean([s.dur_ns for s in h.steps]) / 1e6 if h.steps else 0.0
    rows = [
        [k, f"{v:.3f}", _pct(v / step_ms if step_ms else 0.0)] for k, v in h.breakdown_ms_per_step.items()
    ]
    j = h.to_json()
    period = [s.step_time_ns for s in h.steps]
    notes = [
        f"{len(h.steps)} step(s) over {len({(s.rank, s.pid, s.tid) for s in h.steps})} step thread(s); "
        f"step median {_ms(statistics.median(period)) if period else '0.000'} ms, mean "
        f"{_ms(statistics.fmean(period)) if period else '0.000'} ms; host window (the table's "
        f"100 %) mean {step_ms:.3f} ms",
        f"host dispatch gaps per step: {h.dispatch_gaps_per_step:.1f} gaps, "
        f"{h.dispatch_gap_ms_per_step:.3f} ms, "
        f"median {j['dispatch_gap_median_us']:.1f} µs, p95 {j['dispatch_gap_p95_us']:.1f} µs",
    ]
    if ranks is not None:
        title = f"host (step threads of all {ranks} ranks): what they did, per step"
    elif rank is None:
        title = "host (step thread): what it did"
    else:
        title = f"host (step thread of rank {rank}): what it did"
    return Section(title, ["state", "ms/step", "% of step"], rows, notes)


def comm_sections(report: Report) -> list[Section]:
    """Each rank's communication per step (tracekit.analysis.comm) and, for up to MANY_RANKS ranks, its
    buckets; the slow rank and why in the notes."""
    c = report.communication
    if c is None or not c.ranks:
        return []
    # no `comm` column (= hidden + exposed): nine columns do not fit an 80-column terminal
    figs = ("step", "compute", "hidden", "exposed", "exposed_wait", "exposed_transfer")
    rows = [
        [f"{r.rank}:{'host' if r.device < 0 else r.device}"]
        + [f"{r.ms_per_step(f + '_ns'):.3f}" for f in figs]
        + ["-" if r.straggler_rank is None else str(r.straggler_rank)]
        for r in c.ranks
    ]
    if len(c.ranks) > MANY_RANKS:  # the median and the most exposed rank (the JSON has every rank)
        worst = max(c.ranks, key=lambda r: (r.ms_per_step("exposed_ns"), -r.rank))
        med = ["median"] + [
            f"{statistics.median(r.ms_per_step(f + '_ns') for r in c.ranks):.3f}" for f in figs
        ]
        rows = [med + ["-"], next(row for row, r in zip(rows, c.ranks) if r is worst)]
        rows[1][0] = f"most exposed: {rows[1][0]}"
    out = [
        Section(
            "communication (ms/step)",
            ["rank:dev", "step", "compute", "hidden", "exposed", "waiting", "transfer", "waits on"],
            rows,
            _comm_notes(c),
        )
    ]
    buckets = _bucket_section(c) if len(c.ranks) <= MANY_RANKS else None
    return out + ([buckets] if buckets else [])


def _comm_notes(c: Communication) -> list[str]:
    """What the communication table's figures mean; the clock skew; the slow rank and why."""
    notes = [
        "communication (collectives in flight) = hidden + exposed; exposed: in flight while the rank did not "
        "compute (GPU: no other kernel ran; CPU backend: the step thread was blocked waiting for it), split "
        "into waiting for the last rank to arrive and the transfer after it"
    ]
    if c.clock_skew:
        notes.append(
            "the ranks' clocks disagree (one collective's ends lie > 100 µs apart): waits are not split"
        )
    sr = c.slow_rank
    if sr is not None:
        why = (
            f"; it differs most in {sr.figure}: {sr.value_ms_per_step:.3f} ms/step against "
            f"{sr.others_ms_per_step:.3f} on the others (median)"
            if sr.figure
            else ""
        )
        notes.append(
            f"slow rank: {sr.rank} (the ranks that wait for it: {sr.waited_on_ms_per_step:.3f} ms/step "
            f"exposed waiting for its arrival){why}"
        )
    return notes


def _bucket_section(c: Communication) -> Section | None:
    """Each rank's collectives by bucket (median per step); None where no rank has one."""
    brows = [
        [
            f"{r.rank}:{'host' if r.device < 0 else r.device}",
            f"{_short(b.name, 40)} #{b.index}",
            "-" if b.elements is None else f"{b.elements:,}",
            f"{b.transfer_ms:.3f}",
            f"{b.wait_ms:.3f}",
            f"{b.exposed_ms:.3f}",
            str(b.instances),
        ]
        for r in c.ranks
        for b in r.buckets[:TOP_ROWS]
    ]
    if not brows:
        return None
    return Section(
        "collectives by bucket (median per step)",
        ["rank:dev", "collective #i in its step", "elements", "transfer", "waiting", "exposed", "n"],
        brows,
        ["elements: where the trace records them (NCCL's record_param_comms; not gloo's spans)"],
        align="llrrrrr",
    )


def sync_section(report: Report) -> Section | None:
    if not report.sync_sources:
        return None
    rows = [
        [_source(s.source, s.function), s.op or "-", s.call, f"{s.idle_ms_per_step:.3f}", str(s.gaps)]
        for s in report.sync_sources[:TOP_ROWS]
    ]
    return Section(
        "sync sources",
        ["source (user function)", "op", "call", "idle ms/step", "gaps"],
        rows,
        align="lllrr",
    )


def runtime_section(report: Report) -> Section | None:
    """The `runtime` idle time by the call that held the host (neither a launch nor a sync)."""
    if not report.runtime_calls:
        return None
    rows = [[c.call, f"{c.idle_ms_per_step:.3f}", str(c.gaps)] for c in report.runtime_calls[:TOP_ROWS]]
    return Section("runtime calls that held the host", ["call", "idle ms/step", "gaps"], rows, align="lrr")


def gaps_section(report: Report) -> Section | None:
    if not report.top_gaps:
        return None
    rows = []
    for g in report.top_gaps[:TOP_ROWS]:
        detail = ", ".join(f"{k} {_us(v)}" for k, v in g.slices_ns.items())
        if g.sync is not None:
            detail += (
                f"; after {g.sync.call} in {g.sync.op or '-'} at {_source(g.sync.source, g.sync.function)}"
            )
        rows.append(
            [str(g.step), f"{g.rank}:{g.device}", _us(g.dur_ns), g.cause, _short(g.next_kernel, 32), detail]
        )
    return Section(
        "largest idle gaps",
        ["step", "rank:dev", "µs", "cause", "ended by", "host during the gap (µs)"],
        rows,
        align="rrrlll",
    )


def histogram_section(report: Report) -> Section | None:
    h = report.gap_histogram
    if h is None or not sum(h.counts):
        return None
    rows = []
    edges = list(h.edges_us)
    for i, (n, ns) in enumerate(zip(h.counts, h.idle_ns)):
        if not n:
            continue
        hi = f"{edges[i + 1]:g}" if i + 1 < len(edges) else "∞"
        top = max(CAUSES, key=lambda c: h.idle_ns_by_cause.get(c, (0,) * len(edges))[i])
        rows.append([f"[{edges[i]:g}, {hi})", str(n), _ms(ns), top])
    return Section("idle gaps by length (µs)", ["µs", "gaps", "idle ms", "mostly"], rows, align="lrrl")


def kernel_section(report: Report) -> Section | None:
    if not report.kernel_stats:
        return None
    rows = [
        [
            _short(k.name, 50),
            str(k.kernel.count),
            "graph" if k.graph_launched and not k.api.count else _us(k.api.mean_ns),
            "graph" if k.graph_launched and not k.queue.count else _us(k.queue.mean_ns),
            _us(k.kernel.mean_ns),
            _ms(k.kernel.total_ns),
        ]
        for k in report.kernel_stats[:TOP_ROWS]
    ]
    return Section(
        "kernels (launch API / queue / kernel, mean µs)",
        ["kernel", "calls", "API µs", "queue µs", "kernel µs", "total ms"],
        rows,
    )


def op_section(report: Report) -> Section | None:
    if not report.op_stats:
        return None
    rows = []
    for o in report.op_stats[:TOP_ROWS]:
        n = max(len(o.steps), 1)
        rows.append(
            [_short(o.name, 50), f"{o.calls / n:.1f}", f"{o.us_per_call:.1f}", _ms(sum(o.ns_per_step) / n)]
        )
    ranks = len(report.ranks)
    title = "framework ops (CPU, inclusive)" + (f", summed over the {ranks} ranks" if ranks > 1 else "")
    return Section(title, ["op", "calls/step", "µs/call", "ms/step"], rows)


def _bytes(n: int) -> str:
    """2048 → '2.0 KiB' (tiny_ops' peak read '0.0 MiB' in MiB)."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _source(source: str | None, function: str | None) -> str:
    """'train.py:57 (main)': the python tracer's line is where the function starts."""
    if not source:
        return "-"
    return f"{source} ({function})" if function else source


def other_notes(report: Report) -> list[str]:
    notes = []
    if report.dataloader is not None:
        dl = report.dataloader
        kind = (
            "multi-worker" if dl.multi_worker else "single-process" if dl.multi_worker is False else "unknown"
        )
        notes.append(f"DataLoader: {dl.iterator} ({kind}), {dl.ns_per_step / 1e6:.3f} ms/step in __next__")
    if report.profiler_overhead is not None:
        p = report.profiler_overhead
        notes.append(
            f"profiler overhead: step {p.profiled_step_ms:.3f} ms profiled vs {p.unprofiled_step_ms:.3f} ms "
            f"without ({p.overhead_ratio:+.1%})"
        )
        if p.not_representative:
            notes.append(
                f"the profiled window is not representative of the run: {p.not_representative} "
                f"(profiled: median {p.profiled_step_ms:.3f} ± {p.profiled_spread_ms:.3f} ms over "
                f"{p.profiled_steps} steps; without the profiler: {p.unprofiled_step_ms:.3f} ± "
                f"{p.unprofiled_spread_ms:.3f} ms over {p.unprofiled_steps}); read its figures with the "
                "unprofiled ones"
            )
    if report.compiled is not None:
        notes.extend(compiled_lines(report.compiled))
    graphed = sum(k.graph_launched for k in report.kernel_stats)
    if graphed:
        notes.append(
            f"CUDA graphs: {graphed} kernels ran in graph launches (cudaGraphLaunch): no launch record of "
            "their own, so no API or queue time per kernel (`graph` in the kernel table)"
        )
    if report.cpu_only:
        notes.append(_cpu_only_note(report))
    elif not report.memory:
        notes.append(NO_MEMORY_EVENTS)
    oom = oom_note(report.capture)
    if oom:
        notes.append(oom)
    for odd in report.capture.get("warnings") or []:
        notes.append(f"warning: {odd}")
    if report.savings is not None and report.savings.skipped:
        notes.append(f"step time saved per cause: {report.savings.skipped}.")
    for f in report.capture.get("failed") or []:
        rank = "rank unknown" if f.get("rank") is None else f"rank {f['rank']}"
        notes.append(f"left out: {rank} ({f.get('path')}): {f.get('error')}")
    if many_ranks(report):
        notes.append(
            f"{len(report.ranks)} ranks summarised: `--rank R` shows rank R in full, --json every rank."
        )
    return notes


def compiled_lines(c: CompiledSummary) -> list[str]:
    """torch.compile's code in the steps (analysis/compiled.py), one line per fact."""
    names = ", ".join(r.name.split(": ", 1)[1] for r in c.regions) or "none"
    out = [
        f"torch.compile: compiled frames ran as {names}; Dynamo guards {c.guard_ms_per_step:.3f} ms/step, "
        f"inductor wrapper code {c.wrapper_ms_per_step:.3f} ms/step (framework, inclusive), "
        f"{c.triton_kernels_per_step:.0f} Triton kernels/step ({c.triton_kernel_ms_per_step:.3f} ms)"
    ]
    if c.recompiled_frames:
        out.append(
            f"torch.compile: frame(s) {', '.join(map(str, c.recompiled_frames))} recompiled (code of a "
            "compile id > 0 ran): a guard failed (a new shape, dtype or Python value); "
            "TORCH_LOGS=recompiles says which"
        )
    for step, ms in c.compile_ms_by_step:
        out.append(f"torch.compile: step {step} spent {ms:.1f} ms compiling (framework), not a steady state")
    return out


def input_pipeline_section(report: Report) -> Section | None:
    """The unprofiled steps' loader waits beside the profiled window's, and the steady state the
    workers' own timings give (tracekit.analysis.loader)."""
    ip = report.input_pipeline
    if ip is None:
        return None
    un, w = ip.unprofiled_step_ms, ip.unprofiled_wait_ms
    rows = []
    if un:
        rows.append(
            ["without profiler", f"{ip.unprofiled_step_mean_ms:.3f}", f"{ip.unprofiled_wait_mean_ms:.3f}"]
            + [_pct(ip.unprofiled_wait_share)]
        )
    rows.append(
        ["profiled (trace)", f"{ip.profiled_step_ms:.3f}", f"{ip.profiled_wait_ms:.3f}"]
        + [_pct(ip.profiled_wait_share)]
    )
    st = ip.steady
    if st is not None:
        extra = st.step_ms - (st.consumer_ms or st.step_ms)
        rows.append(["steady state (workers)", f"{st.step_ms:.3f}", f"{extra:.3f}", _pct(extra / st.step_ms)])
    cfg = ip.loader or {}
    notes = []
    if un:
        notes.append(
            f"{len(un)} unprofiled steps timed by the capture (host clock around each fetch); means per "
            f"step (medians: step {ip.unprofiled_step_median_ms:.3f} ms, loader wait "
            f"{ip.unprofiled_wait_median_ms:.3f} ms; ranges {min(un):.3f}-{max(un):.3f} and "
            f"{min(w):.3f}-{max(w):.3f} ms)"
        )
    if st is not None:
        notes += steady_lines(st)
    if cfg.get("dataloader"):
        notes.append(
            f"DataLoader: num_workers {cfg.get('num_workers')}, prefetch_factor {cfg.get('prefetch_factor')} "
            f"(prefetch depth {cfg.get('prefetch_depth')} batches), batch_size {cfg.get('batch_size')}, "
            f"pin_memory {cfg.get('pin_memory')}, persistent_workers {cfg.get('persistent_workers')}"
        )
    elif cfg.get("type"):
        notes.append(f"fetched from {cfg['type']}")
    notes += [f"warning: {x}" for x in ip.warnings]
    columns = ["", "step ms", "loader wait ms", "% of step"]
    return Section(
        "input pipeline: loader wait per step, without and with the profiler", columns, rows, notes
    )


def steady_lines(st: SteadyState) -> list[str]:
    """The steady state in words: what sets it, and each of its three figures with its source."""
    consumer = (
        f"{st.consumer_ms:.3f} ms ({_steps_of(st.consumer_basis)}, less their loader wait)"
        if st.consumer_ms is not None
        else "unknown"
    )
    floor = (
        f"{st.cpu_floor_ms:.3f} ms ({st.batches_per_step * st.worker_cpu_ms:.3g} ms of worker CPU + "
        f"{st.trainer_cpu_ms:.3g} ms of training CPU ({st.trainer_cpu_basis}) per step on "
        f"{st.usable_cpus} usable CPUs)"
        if st.cpu_floor_ms is not None
        else "unknown"
    )
    at_least = "at least " if st.bound == BOUND_CPUS else ""
    lines = [
        f"steady state without the profiler: {at_least}{st.step_ms:.3f} ms/step, set by {_the(st.bound)}; "
        f"the training step alone {consumer}; the workers' pace {st.pool_ms:.3f} ms ({st.workers} workers, "
        f"{st.production_ms:.3f} ms per batch with a CPU of their own, {st.production_wall_ms:.3f} ms as "
        f"they ran, {st.worker_cpu_ms:.3f} ms CPU; {st.batches} batches timed in the workers); the CPUs' "
        f"floor {floor}"
    ]
    if st.bound == BOUND_CPUS:
        lines.append(
            "the CPUs' floor shares them perfectly between workers and trainer: the trainer's threads "
            "waiting on one another while the workers hold the CPUs make the step longer (a lower bound)"
        )
    if st.oversubscribed:
        lines.append(
            f"the DataLoader's {st.workers} workers and the training process' {st.trainer_threads} threads "
            f"are more than the {st.usable_cpus} CPUs the process may use: they compete for them"
        )
    return lines


def report_sections(report: Report) -> list[Section]:
    """Every table of the report, in reading order."""
    out = job_sections(report) if many_ranks(report) else device_sections(report)
    loader = input_pipeline_section(report)
    if loader is not None:
        out.append(loader)
    out.extend(memory_sections(report))
    out.extend(host_sections(report))
    out.extend(comm_sections(report))
    for s in (
        sync_section(report),
        runtime_section(report),
        gaps_section(report),
        histogram_section(report),
        kernel_section(report),
        op_section(report),
    ):
        if s is not None:
            out.append(s)
    return out


def advice_items(report: Report) -> list[tuple[str, list[tuple[str, str]]]]:
    """Each advice as (its message, [(label, text)]): the knob, the predicted saving with its basis, the
    evidence and the share of its step, the what-if command that reproduces the prediction, the note."""
    capture = report.capture.get("path") or "CAPTURE"
    out = []
    for a in report.advice:
        rows: list[tuple[str, str]] = []
        if a.knob:
            rows.append(("knob", a.knob))
        rows.append(("saves", _saving_text(report, a)))
        share = ""
        if a.share is not None:
            share = f" [{a.share:.0%} of the {a.basis or 'profiled'} step]"
        rows.append(("evidence", f"{a.evidence}{share}"))
        cmd = advice_command(a, capture)
        if cmd:
            rows.append(("predict", cmd))
        if a.prediction_note:
            rows.append(("note", a.prediction_note))
        out.append((a.message, rows))
    return out


def _saving_text(report: Report, a: Advice) -> str:
    saved, step = a.saved_ms or {}, a.step_ms or {}
    if not a.whatif:
        return "not predicted (see the note)"
    if saved.get("profiled") is None:
        if report.savings is not None and report.savings.computed:
            return "not predicted (see the note)"
        if report.savings is not None and report.savings.skipped:  # why the analysis skipped them
            return report.savings.skipped
        return "not computed (--no-savings, or a report made without them): the predict command replays it"
    parts = []
    for basis in ("unprofiled", "profiled"):
        ms, of = saved.get(basis), step.get(basis)
        if ms is None or not of:
            continue
        spread = _spread_text(saved) if basis == "unprofiled" else ""
        parts.append(f"{ms:.3f} ms/step of the {basis} {of:.3f} ms ({ms / of:.1%}{spread})")
    bound = "at most " if a.bound else ""
    return bound + ", ".join(parts) + " (replayed)"


# A saving's spread over the profiler's cost is said where it reaches this part of the saving and the
# text's precision (SPREAD_MS)
SPREAD_FRACTION = 0.1
SPREAD_MS = 0.001


def spread_shown(saved: Mapping[str, Optional[float]]) -> bool:
    """Whether an unprofiled saving's spread over the profiler's cost is worth saying: the trace does not
    fix that cost (tracekit.whatif.savings.predict_advice) and the saving moves with it."""
    lo, hi, ms = saved.get("unprofiled_min"), saved.get("unprofiled_max"), saved.get("unprofiled")
    return not (lo is None or hi is None or ms is None or hi - lo < max(SPREAD_MS, SPREAD_FRACTION * abs(ms)))


def _spread_text(saved: Mapping[str, Optional[float]]) -> str:
    """'; X to Y ms at the profiler costs ...' where spread_shown, else ''."""
    if not spread_shown(saved):
        return ""
    lo, hi = saved["unprofiled_min"], saved["unprofiled_max"]
    return f"; {lo:.3f} to {hi:.3f} ms at the profiler costs real captures show: this trace does not fix it"


def advice_lines(report: Report) -> list[str]:
    """The advice as plain lines: the message, then its labelled details indented below it."""
    return ["\n".join([msg] + [f"  {k}: {v}" for k, v in rows]) for msg, rows in advice_items(report)]


__all__ = [
    "report_sections",
    "header",
    "other_notes",
    "advice_lines",
    "advice_items",
    "spread_shown",
    "HOST_STATES",
]


def _cpu_only_note(report) -> str:
    """A capture without device activity: CPU-only, unless its host launched device work (then the
    trace lost its GPU events, and calling it CPU-only would be a wrong verdict)."""
    steps = report.host.steps
    launch_ns = sum(s.breakdown_ns.get("launch", 0) for s in steps)
    if not launch_ns:
        return "CPU-only capture: no device activity; the host breakdown is the whole story."
    return (
        f"no device activity, yet the host spent {launch_ns / 1e6 / max(len(steps), 1):.3f} ms/step in "
        "CUDA launch calls: the trace lost its GPU events (CUPTI's device activity missing, or the trace "
        "trimmed); only the host breakdown can be told, the GPU's idle time cannot."
    )


def _steps_of(basis: str) -> str:
    """'unprofiled' → 'unprofiled steps'; a longer basis says its steps itself."""
    return basis if " " in basis else f"{basis} steps"


def _the(bound: str) -> str:
    """'the input pipeline', 'the training step', 'CPU oversubscription'."""
    return bound if bound[:1].isupper() else f"the {bound}"
