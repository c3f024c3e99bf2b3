"""Renderers of a `DiffResult`: terminal table (rich), Markdown, and a PNG of stacked bars (its JSON is
`DiffResult.to_json()`, printed by tracekit.render.json; the table of renderers is tracekit.render.registry).

Each renderer declares its suffix and writes the result to a stream (`render(result, out)`); the PNG one
writes to a path. None of them computes anything: every number comes from the `DiffResult`.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, Optional

from tracekit.analysis.causes import CAUSE_ROWS
from tracekit.compare.diff import (
    CaptureInfo,
    DiffResult,
    FigureDiff,
    PairDiff,
)
from tracekit.compare.stats import METHOD_RUNS

# -- numbers as text --------------------------------------------------------------------------------------


def _num(v: Optional[float]) -> str:
    if v is None:
        return "—"
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    if a >= 0.01:
        return f"{v:.3f}"
    return f"{v:.2e}"


def _pct(x: float) -> str:
    text = f"{x * 100:+.0f}%" if abs(x) >= 10 else f"{x * 100:+.1f}%"
    return "+0.0%" if text == "-0.0%" else text


def _signed(x: float, unit: str) -> str:
    text = _num(abs(x))
    sign = "+" if x > 0 else ("−" if x < 0 else "±")
    return f"{sign}{text} {unit}".rstrip()


def change_text(f: FigureDiff) -> str:
    """'−9.9%' (relative, from the log ratio) or '+2.00 ms' (a shift, when a value is zero)."""
    if f.estimate is None:
        return "—"
    if f.change is not None:
        return _pct(f.change).replace("-", "−")
    return _signed(f.estimate.shift, f.unit)


def interval_text(f: FigureDiff) -> str:
    e = f.estimate
    if e is None or e.shift_ci is None:
        return "—"
    if not e.shift_ci.bounded:
        return "unbounded"
    if f.change_ci is not None:
        lo, hi = f.change_ci
        return f"[{_pct(lo)}, {_pct(hi)}]".replace("-", "−")
    ci = e.shift_ci
    return f"[{_signed(ci.low, '')}, {_signed(ci.high, f.unit)}]"


def _label(f: FigureDiff) -> str:
    # Backward nodes are named "autograd::engine::evaluate_function: AddmmBackward0": keep the node.
    label = f.label.replace("autograd::engine::evaluate_function: ", "autograd: ")
    return f"{label} ({f.unit})" if f.unit else label


def _who(c: CaptureInfo) -> str:
    bits = [c.workload, f"Python {c.python}" if c.python else None, f"torch {c.torch}" if c.torch else None]
    bits.append(c.device)
    return " · ".join(b for b in bits if b)


def _zero_both(f: FigureDiff) -> bool:
    return f.a == 0 and f.b == 0 and f.estimate is not None and f.estimate.shift == 0


def _steps(c: CaptureInfo) -> str:
    return f"{c.steps} steps" + (f" in {c.runs} runs" if c.runs > 1 else "")


def _sections(pair: PairDiff) -> list[tuple[str, list[FigureDiff]]]:
    """Figures by section, leaving out those that are zero in both captures (say, dataloader idle of a
    model without a DataLoader); `_hidden_line` counts them."""
    out: list[tuple[str, list[FigureDiff]]] = []
    for f in pair.figures:
        if _zero_both(f):
            continue
        if not out or out[-1][0] != f.section:
            out.append((f.section, []))
        out[-1][1].append(f)
    if pair.ops:
        out.append((pair.ops[0].section, list(pair.ops)))
    return out


def _ops_line(pair: PairDiff) -> Optional[str]:
    if not pair.ops:
        return None
    return (
        f"framework ops: the {len(pair.ops)} largest changes of {pair.ops_compared} ops compared; each op's "
        f"interval is {pair.ops_confidence:.2%} so that the listing as a whole holds at "
        f"{1 - (1 - pair.ops_confidence) * pair.ops_compared:.0%} (Bonferroni)"
    )


def _hidden_line(pair: PairDiff) -> Optional[str]:
    hidden = [f.label for f in pair.figures if _zero_both(f)]
    return f"zero in both, not shown: {', '.join(hidden)}" if hidden else None


def _method_line(result: DiffResult) -> str:
    return (
        f"A and B: medians of per-step values. Change B/A − 1: the Hodges–Lehmann estimate (median of all "
        f"step-to-step ratios; in noisy data it can differ from the ratio of the medians) with its "
        f"{result.confidence:.0%} interval from the exact Mann–Whitney distribution; utilisation and total "
        "time: ratio of sums, bootstrap over steps. Where a side pools several runs (A1,A2,...), the unit is "
        "the run: each run's median (or ratio of sums). Significant only when the interval excludes zero."
    )


def _headline(pair: PairDiff) -> str:
    """One sentence on step time, the figure people ask about first."""
    f = pair.figure("step_time")
    e = f.estimate
    if e is not None and e.shift_ci is not None and not e.shift_ci.bounded:
        if e.method == METHOD_RUNS:
            return (
                f"Step time {change_text(f)}, but {e.n_a} and {e.n_b} runs are too few for a "
                f"{e.confidence:.0%} interval run against run: repeat each configuration at least 4 times."
            )
        return (
            f"Step time {change_text(f)}, but {e.n_a} and {e.n_b} steps are too few for a {e.confidence:.0%} "
            "interval: capture more steps (e.g. --schedule wait=1,warmup=1,active=5,repeat=2)."
        )
    if f.significant:
        speed = "faster" if f.improved else "slower"
        return f"Step time {change_text(f)} {interval_text(f)}: {pair.b.label} is {speed}."
    return f"Step time: no significant change ({change_text(f)}, interval {interval_text(f)})."


# -- terminal ---------------------------------------------------------------------------------------------


class TerminalRenderer:
    """A rich table per pair. `width` pins the layout (golden tests; default: the terminal's, 120 when
    the output is not one); `color` adds verdict colours (None: when the output is a terminal)."""

    name = "text"
    suffix = ".txt"
    file_width = 120  # the table's width written to a file, unless --width

    def __init__(self, width: Optional[int] = None, color: Optional[bool] = False) -> None:
        self.width = width
        self.color = color

    def render(self, result: DiffResult, out: IO[str]) -> None:
        from rich import box
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        tty = out.isatty() if hasattr(out, "isatty") else False
        color = tty if self.color is None else self.color
        console = Console(
            file=out,
            width=self.width or (None if tty else self.file_width),
            force_terminal=color,
            color_system="standard" if color else None,
            highlight=False,
            soft_wrap=False,
        )
        for i, pair in enumerate(result.pairs):
            if i:
                console.print()
            console.print(Text(f"{pair.b.label} against {pair.a.label}", style="bold"))
            console.print(f"  A  {pair.a.label}: {_who(pair.a)}, {_steps(pair.a)}")
            console.print(f"  B  {pair.b.label}: {_who(pair.b)}, {_steps(pair.b)}")
            comp = pair.comparability
            style = "green" if comp.comparable else "bold red"
            console.print(Text("  " + comp.summary(), style=style))
            for note in comp.notes:
                console.print(f"  note: {note.describe()}")
            for line in comp.unchecked:
                console.print(f"  note: {line}")
            console.print("  " + _headline(pair))
            for line in pair.control_notes:
                console.print(f"  {line}")
            table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
            table.add_column("figure", no_wrap=True, min_width=30, max_width=36, overflow="ellipsis")
            for name in (pair.a.label, pair.b.label):
                table.add_column(name, justify="right", no_wrap=True, min_width=max(8, len(name)))
            table.add_column("change", justify="right", no_wrap=True, min_width=9)
            table.add_column("interval", justify="right", no_wrap=True, min_width=9)
            table.add_column("verdict", no_wrap=True, min_width=21)
            for section, figures in _sections(pair):
                table.add_row(Text(section, style="bold"), "", "", "", "", "")
                for f in figures:
                    verdict_style = "" if f.improved is None else "green" if f.improved else "red"
                    if f.significant and f.improved is None:
                        verdict_style = "yellow"
                    table.add_row(
                        "  " + _label(f),
                        _num(f.a),
                        _num(f.b),
                        change_text(f),
                        interval_text(f),
                        Text(f.verdict, style=verdict_style),
                    )
            console.print(table)
            for extra in (_ops_line(pair), _hidden_line(pair)):
                if extra:
                    console.print("  " + extra, style="dim")
        console.print(_method_line(result), style="dim")


# -- Markdown ---------------------------------------------------------------------------------------------


def _md(text: str) -> str:
    return text.replace("|", "\\|")


class MarkdownRenderer:
    name = "markdown"
    suffix = ".md"

    def render(self, result: DiffResult, out: IO[str]) -> None:
        w = out.write
        for pair in result.pairs:
            w(f"### {_md(pair.b.label)} against {_md(pair.a.label)}\n\n")
            w(f"- A: **{_md(pair.a.label)}** — {_md(_who(pair.a))}, {_steps(pair.a)}\n")
            w(f"- B: **{_md(pair.b.label)}** — {_md(_who(pair.b))}, {_steps(pair.b)}\n")
            comp = pair.comparability
            w(f"- {'' if comp.comparable else '**'}{_md(comp.summary())}{'' if comp.comparable else '**'}\n")
            for note in comp.notes:
                w(f"- note: {_md(note.describe())}\n")
            for line in comp.unchecked:
                w(f"- note: {_md(line)}\n")
            w(f"- {_md(_headline(pair))}\n")
            for line in pair.control_notes:
                w(f"- {_md(line)}\n")
            w("\n")
            w(f"| figure | {_md(pair.a.label)} | {_md(pair.b.label)} | change | interval | verdict |\n")
            w("|---|---:|---:|---:|---:|---|\n")
            for section, figures in _sections(pair):
                w(f"| **{_md(section)}** | | | | | |\n")
                for f in figures:
                    verdict = f"**{f.verdict}**" if f.significant else f.verdict
                    w(
                        f"| {_md(_label(f))} | {_num(f.a)} | {_num(f.b)} | {change_text(f)} | "
                        f"{interval_text(f)} | {verdict} |\n"
                    )
            for extra in (_ops_line(pair), _hidden_line(pair)):
                if extra:
                    w(f"\n{_md(extra)}\n")
            w("\n")
        w(f"_{_method_line(result)}_\n")


# -- PNG --------------------------------------------------------------------------------------------------

# One colour per part, fixed so that the same cause looks the same in every plot.
PART_COLOURS = {"busy": "#4c72b0", **{c.name: c.plot_colour for c in CAUSE_ROWS}}


class PlotRenderer:
    """One stacked bar per capture, side by side: mean step time split into busy and each idle cause
    (or, for CPU-only captures, the host states). Above each later bar: its step time change against
    the first capture, marked significant or not."""

    name = "png"
    suffix = ".png"

    def render_to(self, result: DiffResult, path: Path, *, replace: bool = True) -> Path:
        import matplotlib

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot as plt

        comps = result.compositions
        names: list[str] = []
        for c in comps:
            names += [k for k, _ in c.parts if k not in names]
        fig, ax = plt.subplots(figsize=(max(4.0, 1.6 * len(comps) + 3.0), 4.8), dpi=110)
        xs = range(len(comps))
        bottoms = [0.0] * len(comps)
        for name in names:
            heights = [dict(c.parts).get(name, 0.0) for c in comps]
            if not any(h > 0 for h in heights):
                continue
            label = name if name in ("busy",) or comps[0].kind == "host" else f"idle: {name}"
            ax.bar(xs, heights, bottom=bottoms, width=0.6, color=PART_COLOURS.get(name), label=label)
            for x, h, b, c in zip(xs, heights, bottoms, comps):
                if c.total_ms and h / c.total_ms >= 0.08:
                    ax.text(
                        x,
                        b + h / 2,
                        f"{h / c.total_ms:.0%}",
                        ha="center",
                        va="center",
                        fontsize=8,
                        color="white",
                    )
            bottoms = [b + h for b, h in zip(bottoms, heights)]
        top = max(bottoms) if bottoms else 1.0
        for i, total in enumerate(bottoms):
            text = f"{total:.3g} ms"
            if i:
                f = result.pairs[i - 1].figure("step_time")
                text += f"\n{change_text(f)}" + (" (significant)" if f.significant else " (not significant)")
            ax.text(i, total + top * 0.02, text, ha="center", va="bottom", fontsize=8)
        ax.set_xticks(list(xs), [c.label for c in comps])
        ax.set_ylabel("mean time per step (ms)")
        ax.set_ylim(0, top * 1.25)
        workloads = sorted({c.workload for c in result.captures if c.workload})
        what = (
            "host time per step by state (CPU-only captures)"
            if all(c.kind == "host" for c in comps)
            else "step time: busy and idle by cause"
        )
        ax.set_title(what + (f" · {', '.join(workloads)}" if workloads else ""), fontsize=10)
        handles, labels = ax.get_legend_handles_labels()  # top of the stack first, as drawn
        ax.legend(
            handles[::-1],
            labels[::-1],
            fontsize=8,
            loc="upper left",
            bbox_to_anchor=(1.0, 1.0),
            frameon=False,
        )
        ax.spines[["top", "right"]].set_visible(False)
        fig.tight_layout()
        from tracekit.data.store import atomic_path

        path = Path(path)
        try:
            with atomic_path(path, replace=replace) as tmp:
                fig.savefig(tmp, format="png")
        finally:
            plt.close(fig)
        return path
