"""The advice rules' predictions against the A/B pairs already in the repository (made before issue 39, on
an H200, A and B in separate processes minutes apart: docs/results/whatif/ and fixtures/h200/).

    .venv/bin/python docs/results/advice/earlier_pairs.py      # writes docs/results/advice/earlier.md

Per pair and round: A's capture analysed as `tracekit analyze` does, the rule the change answers (as in
make_table.py: at its threshold, else with every rule firing), its predicted unprofiled saving beside the
measured one (A's manifest median unprofiled step less B's). These pairs did not alternate A and B in one
process: the same configuration moved by up to 45 % between rounds (docs/results/whatif.md), so a round's
measured change carries that much noise; the mean over rounds is the figure to read.
"""

from __future__ import annotations

import importlib.util
import statistics
import sys
from pathlib import Path

from tracekit.data.store import read_capture

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
_spec = importlib.util.spec_from_file_location("make_table", HERE / "make_table.py")
assert _spec is not None and _spec.loader is not None
make_table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_table)

WHATIF = ROOT / "docs/results/whatif"
# (pair, A, B, the rule the change answers, what B changed)
PAIRS = (
    ("tf32", "heavy", "heavy_tf32", "tf32", "the seed MLP, fp32 → TF32 matmuls"),
    ("sync", "mlp_sync", "mlp", "sync_drain", "small MLP, .sum().item() after every layer → none"),
    ("sync_stack", "mlp_sync_stack", "mlp_stack", "sync_drain", "the same with Python stacks recorded"),
)
# fixtures/h200: the seed MLP and the same under float16 autocast (tensor-core peak = bf16's), one session
FIXTURE_PAIRS = (
    ("precision", "heavy_mlp", "heavy_mlp_amp", "precision", "fp32 → autocast fp16 + GradScaler"),
)


def unprofiled_ms(capture: Path) -> float:
    manifest = (read_capture(capture).meta or {}).get("manifest") or {}
    return statistics.median(manifest["unprofiled_step_ms"])


def rows() -> list[dict]:
    out = []
    cases = []
    for pair, a, b, rule, what in PAIRS:
        for path in sorted(WHATIF.glob(f"{a}-*.parquet")):
            rnd = path.stem.rsplit("-", 1)[1]
            other = WHATIF / f"{b}-{rnd}.parquet"
            if other.exists():
                cases.append((pair, f"{a}-{rnd}", path, other, rule, what))
    for pair, a, b, rule, what in FIXTURE_PAIRS:
        pa, pb = ROOT / "fixtures/h200" / a, ROOT / "fixtures/h200" / b
        cases.append((pair, a, pa, pb, rule, what))
    for pair, name, pa, pb, rule, what in cases:
        if pa.is_dir():  # a run folder: parse it once
            tmp = HERE / f".{name}.parquet"
            make_table.parse_folder(pa, tmp)
            pa_cap, pb_cap = tmp, HERE / f".{name}_B.parquet"
            make_table.parse_folder(pb, pb_cap)
        else:
            pa_cap, pb_cap = pa, pb
        pred = make_table.prediction(pa_cap, rule, None)
        measured = unprofiled_ms(pa_cap) - unprofiled_ms(pb_cap)
        saved = (pred.get("saved_ms") or {}).get("unprofiled")
        out.append(
            {
                "pair": pair,
                "A": name,
                "what": what,
                "rule": rule,
                "fired": pred.get("fired"),
                "A_ms": unprofiled_ms(pa_cap),
                "measured_saved_ms": measured,
                "predicted_saved_ms": saved,
                "error_ms": None if saved is None else saved - measured,
            }
        )
    return out


def markdown(rs: list[dict]) -> str:
    lines = [
        "| pair | A | what B changed | rule (fired at its threshold) | A unprofiled ms | measured saved ms "
        "| predicted saved ms | error ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rs:
        pred = "-" if r["predicted_saved_ms"] is None else f"{r['predicted_saved_ms']:.3f}"
        err = "-" if r["error_ms"] is None else f"{r['error_ms']:+.3f}"
        lines.append(
            f"| {r['pair']} | {r['A']} | {r['what']} | {r['rule']} ({'yes' if r['fired'] else 'no'}) "
            f"| {r['A_ms']:.3f} | {r['measured_saved_ms']:.3f} | {pred} | {err} |"
        )
    by_pair: dict[str, list[dict]] = {}
    for r in rs:
        by_pair.setdefault(r["pair"], []).append(r)
    lines += [
        "",
        "| pair | rounds | measured saved ms, mean | predicted, mean | error |",
        "|---|---|---|---|---|",
    ]
    for pair, group in by_pair.items():
        got = [r for r in group if r["predicted_saved_ms"] is not None]
        if not got:
            continue
        m = statistics.fmean(r["measured_saved_ms"] for r in got)
        p = statistics.fmean(r["predicted_saved_ms"] for r in got)
        lines.append(f"| {pair} | {len(got)} | {m:.3f} | {p:.3f} | {p - m:+.3f} ({(p - m) / m:+.0%}) |")
    return "\n".join(lines) + "\n"


def main() -> int:
    text = markdown(rows())
    (HERE / "earlier.md").write_text(text)
    for tmp in HERE.glob(".*.parquet"):
        tmp.unlink()
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
